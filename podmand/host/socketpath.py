"""The driver socket's path: short enough, in a directory that is ours and private,
and free (only our own stale socket is replaced). The socket itself is bound by the
peer gate (peers.py).

The directory is checked and made 0700 through one descriptor opened without
following a symlink: one swapped in after the check is refused, never followed (as
root, a chmod through it could make ``/etc`` 0700)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from pathlib import Path

from ..errors import StartupError
from ..security.peers import MAX_UNIX_PATH


class SocketError(StartupError):
    """The driver socket path cannot be used safely."""


def socket_path_problem(path: str) -> str | None:
    """Checked before anything is created: grpc would fail late, with a traceback."""
    size = len(os.fsencode(path))
    if size > MAX_UNIX_PATH:
        return (
            f"driver socket path {path!r} is {size} bytes; Unix sockets allow at most {MAX_UNIX_PATH} "
            "(choose a shorter --socket / OPENSHELL_COMPUTE_DRIVER_SOCKET)"
        )
    return None


def prepare_socket(path: str) -> list[Path]:
    """Make the parent 0700 and ours; clear a stale socket of ours, refuse anything else.
    Returns the directories it created (outermost first), for removal after a failed start."""
    parent = Path(path).parent
    if parent.is_symlink():
        raise _refused(parent, "is a symlink; refusing to use it")
    created = [p for p in (*reversed(parent.parents), parent) if not p.exists()]
    try:
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        remove_dirs(created)
        raise SocketError(
            f"cannot create the driver socket directory {parent}: {exc.strerror}; choose a --socket "
            "(OPENSHELL_COMPUTE_DRIVER_SOCKET) in a directory this user may create or owns"
        ) from None
    try:
        _make_private(parent)
    except SocketError:
        remove_dirs(created)  # rmdir never follows a symlink
        raise
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return created
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        raise SocketError(f"driver socket path {path!r} exists but is not an owned Unix socket; remove it by hand")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # stale: nobody listens
            return created
    raise SocketError(f"another process is already serving on {path}")


def _make_private(parent: Path) -> None:
    """Owner and type checked, and the mode set, on the directory itself: a descriptor
    opened without following a final symlink (O_NOFOLLOW; O_DIRECTORY refuses anything
    else), whatever the path names by then."""
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise _refused(parent, f"cannot be opened: {exc.strerror}") from None
        what = "a symlink" if parent.is_symlink() else "not a directory"
        raise _refused(parent, f"is {what}; refusing to use it") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise _refused(parent, f"must be a directory owned by uid {os.geteuid()}")
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _refused(parent: Path, why: str) -> SocketError:
    return SocketError(f"driver socket directory {parent} {why} (choose another --socket / "
                       "OPENSHELL_COMPUTE_DRIVER_SOCKET)")


def remove_dirs(created: list[Path]) -> None:
    """Remove the directories podmand created for its socket, deepest first, if empty."""
    for path in reversed(created):
        with contextlib.suppress(OSError):
            path.rmdir()
