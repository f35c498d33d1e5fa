"""Logging: human lines by default, JSON lines for machines, secrets redacted and
control characters escaped.

Secrets should never reach a log call in the first place, nor a caller's raw
text (servicer.logged_id); the filter is the second line of defence, for text
podmand does not control (Podman's error messages, exceptions)."""

from __future__ import annotations

import json
import logging
import re
import time

# JWTs (the gateway's tokens), wherever they appear.
_SECRET = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
REDACTED = "[REDACTED]"


def redact(text: str) -> str:
    return _SECRET.sub(REDACTED, text)


# A newline in a message would start a line that passes for a record of its own (a forged
# "ready" line); carriage returns, escape sequences and other C0 and C1 controls rewrite the
# terminal, and viewers break lines at U+2028 and U+2029 too. Each is written as Python
# escapes it (\n, \x1b, \u2028). Tracebacks keep their line breaks, which a reader needs.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_controls(text: str) -> str:
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class RedactingFilter(logging.Filter):
    """Every record's message, whichever the format: secrets redacted, controls escaped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = escape_controls(redact(message))
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


FIELDS = "fields"  # ``extra={FIELDS: {...}}``: structured fields of a log line (JSON keys)


def fields(**values: object) -> dict[str, dict[str, object]]:
    """The ``extra`` argument that gives a log line its structured fields."""
    return {FIELDS: values}


class JsonFormatter(logging.Formatter):
    """One object per line; a record's structured fields become keys of their own."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in (getattr(record, FIELDS, None) or {}).items():
            if key not in doc:
                doc[key] = redact(value) if isinstance(value, str) else value
        if record.exc_text:
            doc["exception"] = record.exc_text
        return json.dumps(doc, separators=(",", ":"), default=str)


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(RedactingFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if level.lower() == "warn" else level.upper())
    logging.getLogger("grpc").setLevel(logging.WARNING)
