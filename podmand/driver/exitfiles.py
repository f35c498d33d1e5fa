"""Container exits as conmon records them: an inotify watch on Podman's exit directory.

conmon writes ``<exit dir>/<container id>`` the moment a container's process
ends; Podman itself learns of the exit later (its event log is polled, a
``/wait`` polls every 250 ms).  Watching that directory costs Podman nothing
and no descriptor per container.  It only works on the same host as Podman:
the directory is found from a running container's conmon command line
(``--exit-dir``), so a podmand in another PID namespace (the sidecar) or
without access to ``/proc`` simply has no watcher and relies on the event
stream.  Nothing is trusted from the directory but a file name: it only ever
prompts an inspect.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("podmand.exits")

_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


def exit_dir_of(conmon_pid: int, container_id: str, proc: Path = Path("/proc")) -> Path | None:
    """Podman's exit directory, read from conmon's command line; None when that
    process is not this container's conmon (another PID namespace) or not readable."""
    if conmon_pid <= 0 or not container_id:
        return None
    try:
        argv = (proc / str(conmon_pid) / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in argv]
    if not args or not os.path.basename(args[0]).startswith("conmon") or container_id not in args:
        return None
    for i, arg in enumerate(args[:-1]):
        if arg == "--exit-dir" and args[i + 1].startswith("/"):
            return Path(args[i + 1])
    return None


def parse(buffer: bytes) -> tuple[list[str], bool]:
    """File names written or moved into the directory, and whether the kernel's
    queue overflowed (then anything may have been missed)."""
    names: list[str] = []
    overflow = False
    offset = 0
    while offset + _HEADER.size <= len(buffer):
        _wd, mask, _cookie, length = _HEADER.unpack_from(buffer, offset)
        raw = buffer[offset + _HEADER.size : offset + _HEADER.size + length]
        offset += _HEADER.size + length
        if mask & _IN_Q_OVERFLOW:
            overflow = True
        elif mask & (_IN_CLOSE_WRITE | _IN_MOVED_TO):
            name = raw.split(b"\0", 1)[0].decode(errors="replace")
            if name:
                names.append(name)
    return names, overflow


class ExitWatch:
    """One inotify descriptor on the exit directory, read on the event loop.

    ``on_exit(container_id)`` for each exit file; ``on_overflow()`` when events were lost."""

    def __init__(self, directory: Path, on_exit: Callable[[str], None], on_overflow: Callable[[], None]) -> None:
        self.directory = directory
        self._on_exit = on_exit
        self._on_overflow = on_overflow
        self._fd = -1

    def start(self) -> bool:
        """Begin watching; False (and logged) when the kernel or the directory refuses."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)  # the C library CPython itself links
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1")
            wd = libc.inotify_add_watch(fd, os.fsencode(self.directory), _IN_CLOSE_WRITE | _IN_MOVED_TO)
            if wd < 0:
                err = ctypes.get_errno()
                os.close(fd)
                raise OSError(err, f"inotify_add_watch {self.directory}")
        except (OSError, AttributeError) as exc:
            log.info("not watching conmon's exit files (%s); exits come from Podman's events", exc)
            return False
        self._fd = fd
        asyncio.get_running_loop().add_reader(fd, self._read)
        log.info("watching conmon's exit files in %s", self.directory)
        return True

    @property
    def active(self) -> bool:
        return self._fd >= 0

    def _read(self) -> None:
        try:
            buffer = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return
        except OSError as exc:
            log.warning("exit-file watch failed (%s); exits come from Podman's events", exc)
            self.close()
            self._on_overflow()
            return
        names, overflow = parse(buffer)
        for name in names:
            self._on_exit(name)
        if overflow:
            self._on_overflow()

    def close(self) -> None:
        if self._fd >= 0:
            asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
