"""Waiting on a condition with a deadline: the tests' only way to wait for state."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

# Every deadline is multiplied by this: a host that runs everything several times slower
# (tests/setup-vm.sh's emulated VM sets 4) gets the same tests, not weaker ones.
SCALE = float(os.environ.get("PODMAND_TEST_DEADLINE_SCALE") or 1)


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
               detail: Callable[[], object] | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail at the deadline,
    naming ``what`` and, when given, ``detail()`` (e.g. what was seen so far)."""
    timeout *= SCALE
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            extra = f"; {detail()}" if detail else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(0.02)
