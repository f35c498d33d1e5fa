"""Logs: JSON lines for machines, and secrets redacted whatever reaches a log call."""

from __future__ import annotations

import io
import json
import logging

from podmand import logs
from tests.jwt import make_token


def capture(fmt: str) -> tuple[logging.Logger, io.StringIO]:
    logs.setup("debug", fmt)
    stream = io.StringIO()
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    return logging.getLogger("podmand.test"), stream


def test_json_lines_carry_level_logger_and_message() -> None:
    """--log-format json: one parseable object per line."""
    log, out = capture("json")
    log.info("rpc=%s code=%s", "GetSandbox", "OK")
    doc = json.loads(out.getvalue())
    assert (doc["level"], doc["logger"], doc["message"]) == ("info", "podmand.test", "rpc=GetSandbox code=OK")
    assert doc["time"].endswith("Z")


def test_tokens_and_credentials_are_redacted_in_messages_and_tracebacks() -> None:
    """A token or credential smuggled in by an error message never reaches the log."""
    token = make_token("sb1")
    credential = "pdc1.eyJzaWQiOiJzYjEifQ.c2lnbmF0dXJl"
    log, out = capture("human")
    log.warning("podman said: %s and %s", token, credential)
    try:
        raise RuntimeError(f"boom {token}")
    except RuntimeError:
        log.exception("failed")
    text = out.getvalue()
    assert token not in text and credential not in text
    assert text.count(logs.REDACTED) == 3
    assert "boom" in text and "podman said" in text
