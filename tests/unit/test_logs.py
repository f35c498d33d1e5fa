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


def test_tokens_are_redacted_in_messages_and_tracebacks() -> None:
    """A token smuggled in by an error message never reaches the log."""
    token = make_token("sb1")
    log, out = capture("human")
    log.warning("podman said: %s and %s", token, token)
    try:
        raise RuntimeError(f"boom {token}")
    except RuntimeError:
        log.exception("failed")
    text = out.getvalue()
    assert token not in text
    assert text.count(logs.REDACTED) == 3
    assert "boom" in text and "podman said" in text


def test_json_lines_carry_structured_fields_redacted() -> None:
    """RPC lines are queryable by field (rpc, sandbox, code, ms), not only as text in message."""
    log, out = capture("json")
    token = make_token("sb1")
    log.warning("rpc=%s code=%s", "CreateSandbox", "INVALID_ARGUMENT",
                extra=logs.fields(rpc="CreateSandbox", sandbox="sb1", code="INVALID_ARGUMENT", ms=1.5,
                                  error=f"bad token {token}", level="not-overridden"))
    doc = json.loads(out.getvalue())
    assert (doc["rpc"], doc["sandbox"], doc["code"], doc["ms"]) == ("CreateSandbox", "sb1", "INVALID_ARGUMENT", 1.5)
    assert token not in out.getvalue() and logs.REDACTED in doc["error"]
    assert doc["level"] == "warning"  # a field never replaces the record's own keys


def test_human_lines_ignore_fields() -> None:
    log, out = capture("human")
    log.info("rpc=%s", "GetSandbox", extra=logs.fields(rpc="GetSandbox", ms=0.2))
    assert out.getvalue().rstrip().endswith("podmand.test: rpc=GetSandbox")


FORGED = "2026-01-01 00:00:00,000 INFO podmand: podmand ready: serving unix:///tmp/forged.sock"


def test_control_characters_in_messages_are_escaped_in_both_formats() -> None:
    """Whatever text reaches a log call (a Podman error message, a value no check has seen
    yet), it stays on its record's line: newlines, other C0 and C1 controls and Unicode
    line separators are escaped as Python writes them; tracebacks keep their lines."""
    hostile = f"a\n{FORGED}\r\x1b[2J\x85\u2028\x00\tz"
    escaped = f"a\\n{FORGED}\\r\\x1b[2J\\x85\\u2028\\x00\\tz"
    for fmt in ("human", "json"):
        log, out = capture(fmt)
        log.warning("podman said: %s", hostile)
        log.warning(hostile)  # the message itself, without arguments
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed with %s", "x\ny")
        lines = out.getvalue().splitlines()
        if fmt == "json":
            messages = [json.loads(line)["message"] for line in lines]
            assert messages == [f"podman said: {escaped}", escaped, "failed with x\\ny"]
            assert "Traceback (most recent call last):\n" in json.loads(lines[2])["exception"]
        else:
            assert not any(line.startswith(FORGED[:10]) for line in lines), lines
            assert lines[0].endswith(f"podmand.test: podman said: {escaped}") and lines[1].endswith(escaped)
            assert lines[2].endswith("podmand.test: failed with x\\ny")
            assert lines[3] == "Traceback (most recent call last):" and lines[-1] == "RuntimeError: boom"
