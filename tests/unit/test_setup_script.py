"""tests/setup-podman.sh on a shared host: it stops only services it started itself."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.wait import wait_until

SETUP = Path(__file__).resolve().parents[1] / "setup-podman.sh"


def start_time(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(") ", 1)[1].split()[19]


@pytest.fixture
def decoy(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A process that looks exactly like a Podman API service on a socket (someone else's)."""
    sock = tmp_path / "podman.sock"
    argv0 = f"podman system service --time=0 unix://{sock}"
    proc = subprocess.Popen(["bash", "-c", f'exec -a "{argv0}" sleep 300'])
    try:
        wait_until(lambda: argv0 in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(), 5, "the decoy's exec")
        yield proc, sock
    finally:
        proc.kill()
        proc.wait()


def stop(tmp_path: Path, sock: Path) -> None:
    env = {**os.environ, "PODMAND_TEST_STATEDIR": str(tmp_path / "state"), "PODMAN_ROOTFUL_SOCK": str(sock)}
    subprocess.run(["bash", str(SETUP), "stop"], env=env, check=True, capture_output=True, timeout=30)


@pytest.mark.parametrize("record", ["none", "stale start time", "pidfile beside the socket"])
def test_a_service_it_did_not_start_is_never_stopped(tmp_path: Path, decoy: tuple[subprocess.Popen[bytes], Path],
                                                      record: str) -> None:
    proc, sock = decoy
    (tmp_path / "state").mkdir()
    if record == "stale start time":  # the pid was ours once, and has been reused since
        (tmp_path / "state" / "rootful.service").write_text(f"{proc.pid} 1 {os.getuid()} {sock}\n")
    if record == "pidfile beside the socket":  # what the script used to trust
        Path(f"{sock}.pid").write_text(f"{proc.pid}\n")
    stop(tmp_path, sock)
    assert proc.poll() is None


def test_the_service_it_started_is_stopped(tmp_path: Path, decoy: tuple[subprocess.Popen[bytes], Path]) -> None:
    """The same decoy, recorded as the script records what it starts, is stopped (the check can fail)."""
    proc, sock = decoy
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "rootful.service").write_text(f"{proc.pid} {start_time(proc.pid)} {os.getuid()} {sock}\n")
    stop(tmp_path, sock)
    assert proc.wait(10) is not None
    assert not (tmp_path / "state" / "rootful.service").exists()
