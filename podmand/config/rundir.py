"""The user's runtime directory, chosen as Podman chooses it.

Podman (``util.GetRuntimeDir`` in 4.x) uses ``$XDG_RUNTIME_DIR``; without it
``/run/user/<uid>`` when that is a directory of ours; else
``${TMPDIR:-/tmp}/podman-run-<uid>``, which it creates. Hosts without systemd
or logind have no ``/run/user/<uid>``, and a user cannot create one, so podmand
must land in the same fallback as Podman, or the two look for each other's
sockets in different places. Root uses ``/run``.

``resolve`` only looks; ``ensure`` creates the fallback and refuses one that
another user could have planted (a symlink, not ours, writable by others).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from ..errors import StartupError

Source = Literal["root", "XDG_RUNTIME_DIR", "/run/user", "fallback"]


class RuntimeDirError(StartupError):
    """The runtime directory cannot be used safely; the message says why and what to do."""


@dataclass(frozen=True)
class RuntimeDir:
    path: str
    source: Source
    note: str = ""  # why an earlier choice was passed over ("" when none was)

    @property
    def under_tmp(self) -> bool:
        return self.path == "/tmp" or self.path.startswith("/tmp/")


def own_dir_problem(path: str, uid: int, lstat: Callable[[str], os.stat_result] = os.lstat) -> str:
    """'' when ``path`` is a directory owned by ``uid`` (symlinks followed, as Podman does), else why not."""
    try:
        st = lstat(os.path.realpath(path))
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not {uid}"
    return ""


def fallback_path(environ: Mapping[str, str], uid: int) -> str:
    """Go's os.TempDir(): $TMPDIR when set, else /tmp."""
    return os.path.join(environ.get("TMPDIR") or "/tmp", f"podman-run-{uid}")


def resolve(
    environ: Mapping[str, str] | None = None,
    uid: int | None = None,
    lstat: Callable[[str], os.stat_result] = os.lstat,
) -> RuntimeDir:
    """The directory Podman would use for this user; nothing is created."""
    env = os.environ if environ is None else environ
    uid = os.geteuid() if uid is None else uid
    if uid == 0:
        return RuntimeDir("/run", "root")
    notes = []
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if xdg:
        problem = own_dir_problem(xdg, uid, lstat)
        if not problem:
            return RuntimeDir(xdg, "XDG_RUNTIME_DIR")
        notes.append(f"XDG_RUNTIME_DIR={xdg} {problem}")
    run_user = f"/run/user/{uid}"
    problem = own_dir_problem(run_user, uid, lstat)
    if not problem:
        return RuntimeDir(run_user, "/run/user", "; ".join(notes))
    notes.append(f"{run_user} {problem}")
    return RuntimeDir(fallback_path(env, uid), "fallback", "; ".join(notes))


def fallback_problem(st: os.stat_result, uid: int) -> str:
    """'' when a fallback directory (from lstat) is safe to put sockets in, else why not."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def ensure(runtime: RuntimeDir) -> str:
    """Create the fallback directory (0700) if missing and check it; other sources are used as found."""
    if runtime.source != "fallback":
        return runtime.path
    uid = os.geteuid()
    try:
        os.mkdir(runtime.path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise RuntimeDirError(f"cannot create the runtime directory {runtime.path}: {exc.strerror}") from None
    problem = fallback_problem(os.lstat(runtime.path), uid)
    if problem:
        raise RuntimeDirError(
            f"the runtime directory {runtime.path} {problem}; refusing to put Podman's and podmand's sockets "
            f"there (XDG_RUNTIME_DIR is unset and /run/user/{uid} does not exist). Remove it, or set "
            "XDG_RUNTIME_DIR to a directory of this user's (as root: loginctl enable-linger <user> gives "
            f"/run/user/{uid})"
        )
    return runtime.path


def ensure_holding(path: str, runtime: RuntimeDir | None = None) -> None:
    """Create the fallback runtime directory safely when ``path`` (a socket) lies in it: created
    on the way by the socket's ``mkdir -p`` it would be world-readable and unchecked."""
    runtime = resolve() if runtime is None else runtime
    if runtime.source == "fallback" and path.startswith(runtime.path + "/"):
        ensure(runtime)
