"""Waiting on a condition with a deadline: the tests' only way to wait for state."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
               detail: Callable[[], object] | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail at the deadline,
    naming ``what`` and, when given, ``detail()`` (e.g. what was seen so far)."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            extra = f"; {detail()}" if detail else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(0.02)
