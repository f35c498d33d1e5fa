"""Unit tests for podmand.host.limits: the descriptor limit raised at start."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from podmand.host.limits import nofile_target

INF = resource.RLIM_INFINITY


@pytest.mark.parametrize(
    ("soft", "hard", "nr_open", "expected"),
    [
        (1024, 524288, 1048576, 524288),  # the usual systemd setting: up to the hard limit
        (1024, 1024, 1048576, 1024),  # nothing to raise
        (1024, INF, 1048576, 1048576),  # unlimited hard: the kernel's per-process cap
        (4096, 2048, 1048576, 4096),  # never lowered
        (INF, INF, 1048576, INF),
    ],
)
def test_nofile_target(soft: int, hard: int, nr_open: int, expected: int) -> None:
    assert nofile_target(soft, hard, nr_open) == expected


def test_raise_nofile_limit_in_a_child() -> None:
    """In a fresh process with soft < hard, the soft limit ends at the hard limit."""
    code = (
        "import resource; from podmand.host.limits import raise_nofile_limit;"
        "s, h = resource.getrlimit(resource.RLIMIT_NOFILE); resource.setrlimit(resource.RLIMIT_NOFILE, (256, h));"
        "got = raise_nofile_limit(); print(got, resource.getrlimit(resource.RLIMIT_NOFILE)[0], h)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3],
                         capture_output=True, text=True, check=True).stdout.split()
    got, soft, hard = map(int, out)
    assert got == soft
    assert soft == hard or (hard == INF and soft > 256)


def test_raise_nofile_limit_logs_the_limit_at_info_once() -> None:
    """Operators see the descriptor limit in force in serve's log, with what it was."""
    code = (
        "import logging, resource; logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s');"
        "from podmand.host.limits import raise_nofile_limit;"
        "s, h = resource.getrlimit(resource.RLIMIT_NOFILE); resource.setrlimit(resource.RLIMIT_NOFILE, (256, h));"
        "print(raise_nofile_limit(), h)"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3],
                         capture_output=True, text=True, check=True)
    got, hard = map(int, run.stdout.split())
    lines = [line for line in run.stderr.splitlines() if "RLIMIT_NOFILE" in line]
    shown = "unlimited" if hard == INF else str(hard)
    assert lines == [f"INFO descriptor limit (RLIMIT_NOFILE): soft {got} (was 256), hard {shown}"]
