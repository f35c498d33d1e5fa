"""One podmand per state directory: an exclusive lock on ``<state>/podmand.lock``.

Two podmands on one state directory would collect each other's token files as
garbage. The kernel drops a flock when its holder dies, so a stale file never
blocks; the file names its holder, for the refusal message of the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ..errors import StartupError
from ..sandbox.files import ensure_dir

LOCK_FILE = "podmand.lock"


class StateDirError(StartupError):
    """The state directory cannot be used: in use, not writable, or hidden from Podman."""


def holder_record(pid: int, socket_path: str) -> bytes:
    """What the lock file says about its holder."""
    return f"pid={pid}\nsocket={socket_path}\n".encode()


def describe_holder(record: str) -> str:
    fields = dict(line.split("=", 1) for line in record.splitlines() if "=" in line)
    if not fields.get("pid"):
        return "its PID is not recorded yet"
    where = f", driver socket {fields['socket']}" if fields.get("socket") else ""
    return f"PID {fields['pid']}{where}"


def unusable(state_dir: Path, exc: OSError) -> StateDirError:
    return StateDirError(f"state directory {state_dir} is not usable: {exc.strerror}: {exc.filename}")


def lock_state_dir(state_dir: Path, socket_path: str) -> int:
    """Take the lock for the life of the process (or until ``unlock_state_dir``); its fd."""
    try:
        ensure_dir(state_dir)
        fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise unusable(state_dir, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = describe_holder(os.pread(fd, 4096, 0).decode(errors="replace"))
        os.close(fd)
        raise StateDirError(
            f"state directory {state_dir} is in use by another podmand ({holder}); stop it, or give this "
            "one its own state directory (--state-dir / PODMAND_STATE_DIR)"
        ) from None
    record = holder_record(os.getpid(), socket_path)
    os.pwrite(fd, record, 0)  # then cut: no reader ever sees an empty file while we hold it
    os.ftruncate(fd, len(record))
    return fd


def unlock_state_dir(fd: int) -> None:
    """Clear the holder record while still holding the lock, then release it."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)
