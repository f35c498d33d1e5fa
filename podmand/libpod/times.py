"""Podman's times: the RFC 3339 strings its API reports, read once, one way.

Every reader (snapshots' condition times, exit ordering, garbage collection's
age, ctl's columns) goes through :func:`parse_time`, so no two of them can
disagree on what a time says. Go's zero time (``0001-01-01T00:00:00Z``, a field
never set) reads as none.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GO_ZERO = datetime(1, 1, 1, tzinfo=UTC)  # a field Go never set


def _parse(text: str) -> tuple[datetime, str] | None:
    """The whole seconds as an aware datetime, and the fraction's digits kept apart,
    so that no float rounding reaches the seconds."""
    match = _RFC3339.match(text.strip()) if text else None
    if not match:
        return None
    base, frac, zone = match.groups()
    try:
        dt = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone)).astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    if dt == _GO_ZERO:
        return None
    return dt, frac or "0"


def parse_time(text: str) -> datetime | None:
    """A Podman time as an aware UTC datetime, the fraction cut to microseconds."""
    parsed = _parse(text)
    if parsed is None:
        return None
    dt, frac = parsed
    return dt.replace(microsecond=int(frac[:6].ljust(6, "0")))


def unix_seconds(when: datetime) -> int:
    """Whole seconds since the epoch, fractions dropped, in integer arithmetic."""
    return (when.replace(microsecond=0) - _EPOCH) // timedelta(seconds=1)


def epoch(text: str) -> float | None:
    """A Podman time as Unix seconds with its whole fraction (nanoseconds where given)."""
    parsed = _parse(text)
    if parsed is None:
        return None
    dt, frac = parsed
    return unix_seconds(dt) + float("0." + frac)

