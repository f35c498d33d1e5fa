"""Unit tests for the one-podmand-per-state-directory lock (statedir) and the driver socket path (socketpath)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from podmand.host.socketpath import prepare_socket, remove_dirs, socket_path_problem
from podmand.host.statedir import (
    LOCK_FILE,
    StateDirError,
    describe_holder,
    holder_record,
    lock_state_dir,
    unlock_state_dir,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_holder_record_round_trip() -> None:
    assert describe_holder(holder_record(4242, "/run/x.sock").decode()) == "PID 4242, driver socket /run/x.sock"
    assert describe_holder("pid=7\nsocket=\n") == "PID 7"
    assert describe_holder("") == "its PID is not recorded yet"


def test_second_lock_refused_naming_the_holder(tmp_path: Path) -> None:
    """flock conflicts between open file descriptions, even within one process."""
    state = tmp_path / "state"
    fd = lock_state_dir(state, "/run/first.sock")
    try:
        assert (state / LOCK_FILE).read_text() == f"pid={os.getpid()}\nsocket=/run/first.sock\n"
        with pytest.raises(StateDirError) as exc:
            lock_state_dir(state, "/run/second.sock")
        text = str(exc.value)
        assert f"PID {os.getpid()}" in text and "/run/first.sock" in text and str(state) in text
        assert "/run/second.sock" not in text
    finally:
        unlock_state_dir(fd)
    assert (state / LOCK_FILE).read_text() == ""  # released: the record is cleared
    unlock_state_dir(lock_state_dir(state, "/run/second.sock"))


def test_stale_lock_file_does_not_block(tmp_path: Path) -> None:
    """A holder killed without cleanup leaves its record, but the kernel dropped its lock."""
    (tmp_path / LOCK_FILE).write_text("pid=999999\nsocket=/run/dead.sock\n")
    fd = lock_state_dir(tmp_path, "/run/new.sock")
    try:
        assert (tmp_path / LOCK_FILE).read_text() == f"pid={os.getpid()}\nsocket=/run/new.sock\n"
    finally:
        unlock_state_dir(fd)


def test_lock_released_when_holder_dies(tmp_path: Path) -> None:
    """A process that held the lock and was killed leaves it free."""
    code = (
        "import os, signal, sys; from pathlib import Path; from podmand.host.statedir import lock_state_dir;"
        f"lock_state_dir(Path({str(tmp_path)!r}), '/run/child.sock'); print('locked', flush=True);"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    child = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert child.stdout.strip() == "locked" and child.returncode == -9
    unlock_state_dir(lock_state_dir(tmp_path, "/run/new.sock"))


def test_unusable_state_dir(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StateDirError, match="is not usable"):
        lock_state_dir(tmp_path / "file" / "state", "/run/x.sock")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSHELL_", "PODMAND_"))}
    env.update(extra)
    return env


def test_cli_second_podmand_exits_1_naming_the_first(tmp_path: Path) -> None:
    """The lock is taken before Podman is looked for: a second podmand refuses at once."""
    state = tmp_path / "state"
    fd = lock_state_dir(state, "/run/first.sock")
    try:
        env = clean_env(PODMAND_STATE_DIR=str(state), OPENSHELL_PODMAN_SOCKET=str(tmp_path / "none.sock"),
                        OPENSHELL_COMPUTE_DRIVER_SOCKET=str(tmp_path / "second.sock"))
        proc = subprocess.run([sys.executable, "-m", "podmand"], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
    finally:
        unlock_state_dir(fd)
    assert proc.returncode == 1, proc.stderr
    assert f"PID {os.getpid()}" in proc.stderr and "/run/first.sock" in proc.stderr


def test_cli_no_subcommand_serves_and_checks_https_without_tls(tmp_path: Path) -> None:
    """``podmand`` alone is ``podmand serve``; an https endpoint without TLS files stops it with 2."""
    env = clean_env(OPENSHELL_GRPC_ENDPOINT="https://127.0.0.1:17670", PODMAND_STATE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "podmand"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "OPENSHELL_GRPC_ENDPOINT" in proc.stderr and "OPENSHELL_PODMAN_TLS_CA" in proc.stderr
    assert not (tmp_path / LOCK_FILE).exists()  # refused before anything was touched


def test_socket_path_length_checked_before_anything(tmp_path: Path) -> None:
    """108+ bytes: refused naming the size and the limit; 107 is fine."""
    fits = "/" + "s" * 106
    assert socket_path_problem(fits) is None
    long = "/" + "s" * 107
    assert socket_path_problem(long) == (
        f"driver socket path {long!r} is 108 bytes; Unix sockets allow at most 107 "
        "(choose a shorter --socket / OPENSHELL_COMPUTE_DRIVER_SOCKET)"
    )
    assert "is 108 bytes" in (socket_path_problem("/" + "é" * 53 + "x") or "")  # bytes, not characters


def test_prepare_socket_reports_the_directories_it_created(tmp_path: Path) -> None:
    """So a failed start removes them again, and only them."""
    created = prepare_socket(str(tmp_path / "a" / "b" / "d.sock"))
    assert created == [tmp_path / "a", tmp_path / "a" / "b"]
    assert oct(os.stat(tmp_path / "a" / "b").st_mode & 0o777) == "0o700"
    assert prepare_socket(str(tmp_path / "a" / "b" / "d.sock")) == []
    remove_dirs(created)
    assert not (tmp_path / "a").exists() and tmp_path.exists()


def test_remove_dirs_keeps_what_is_not_empty(tmp_path: Path) -> None:
    created = prepare_socket(str(tmp_path / "a" / "d.sock"))
    (tmp_path / "a" / "someone-elses").write_text("")
    remove_dirs(created)
    assert (tmp_path / "a" / "someone-elses").exists()
