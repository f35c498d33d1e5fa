"""Finding the Podman API socket, and saying exactly why when there is none."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..config import rundir
from ..errors import StartupError
from ..libpod import PodmanClient, PodmanUnavailable


@dataclass(frozen=True)
class Attempt:
    path: str
    problem: str  # "" when the socket answered


class NoPodmanSocket(StartupError):
    """``why_not_started``: why podmand did not start Podman's API service itself."""

    def __init__(self, attempts: list[Attempt], why_not_started: str = "") -> None:
        lines = [f"  {a.path}: {a.problem}" for a in attempts]
        super().__init__(
            "no responsive Podman API socket found; tried:\n"
            + "\n".join(lines)
            + (f"\n{why_not_started}" if why_not_started else "")
            + "\nstart one with 'podman system service --time=0 unix://<path>' "
            "(or 'systemctl --user enable --now podman.socket') and set OPENSHELL_PODMAN_SOCKET, "
            "or let podmand start it (podman_autostart, the default); see docs/podman-api.md in podmand's repository"
        )
        self.attempts = attempts


def podman_socket_in(runtime: rundir.RuntimeDir) -> str:
    """Podman's default API socket in a runtime directory (root: /run/podman/podman.sock)."""
    return os.path.join(runtime.path, "podman", "podman.sock")


ROOTFUL_SOCKET = "/run/podman/podman.sock"


def _users_own(env: Mapping[str, str], uid: int) -> list[str]:
    """The sockets of this user's own Podman, in the upstream probe order."""
    out = []
    if env.get("XDG_RUNTIME_DIR"):
        out.append(os.path.join(env["XDG_RUNTIME_DIR"], "podman", "podman.sock"))
    out.append(f"/run/user/{uid}/podman/podman.sock")
    if uid != 0:  # where Podman (and podmand's autostart) puts it without logind
        out.append(podman_socket_in(rundir.resolve(env, uid)))
    home = env.get("HOME") or os.path.expanduser("~")
    out.append(os.path.join(home, ".local", "share", "containers", "podman", "machine", "podman.sock"))
    return out


def candidates(explicit: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The upstream probe order, plus the rootful socket (upstream forgets it)."""
    env = os.environ if environ is None else environ
    if explicit:
        return [explicit.removeprefix("unix://")]
    return list(dict.fromkeys([*_users_own(env, os.geteuid()), ROOTFUL_SOCKET]))


def socket_owners(path: str, env: Mapping[str, str], uid: int) -> set[int] | None:
    """Who may own the socket at a well-known location (None: a path podmand knows nothing
    about, taken as named). Whoever owns the socket gets podmand's registry credentials."""
    if path == ROOTFUL_SOCKET:
        return {0}
    if path in _users_own(env, uid):
        return {uid, 0}
    return None


def fallback_problem(path: str, env: Mapping[str, str], uid: int) -> str:
    """'' unless ``path`` lies in the /tmp fallback runtime directory and that directory is
    one another user could have planted (rundir.ensure's rules), or does not exist."""
    directory = rundir.fallback_path(env, uid)
    if uid == 0 or not path.startswith(directory + "/"):
        return ""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot stat {directory}: {exc.strerror}"
    problem = rundir.fallback_problem(st, uid)
    return f"not used: its directory {directory} {problem} (another user could have planted it)" if problem else ""


async def probe(path: str) -> str:
    """'' when ``path`` is a libpod API that answers ``/_ping``, else why not. A socket in a
    well-known place that another user could have put there is never connected to."""
    env, uid = os.environ, os.geteuid()
    unsafe = fallback_problem(path, env, uid)
    if unsafe:
        return unsafe
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except PermissionError:
        return "permission denied (cannot reach the path)"
    except OSError as exc:
        return f"cannot stat: {exc.strerror}"
    if not stat.S_ISSOCK(st.st_mode):
        return "exists but is not a socket"
    owners = socket_owners(path, env, uid)
    if owners is not None and st.st_uid not in owners:
        whose = "root" if owners == {0} else f"this user (uid {uid}) or root"
        return f"not used: the socket is owned by uid {st.st_uid}, not {whose} (another user could impersonate Podman)"
    client = PodmanClient(path)
    try:
        resp = await client.ping()
    except PodmanUnavailable as exc:
        cause = exc.__cause__
        if isinstance(cause, PermissionError):
            return "permission denied (connect)"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (is the Podman service running?)"
        return f"no answer: {exc}"
    finally:
        await client.close()
    if resp.status != 200:
        return f"answered /_ping with HTTP {resp.status}"
    if "libpod-api-version" not in resp.headers:
        return "answers, but is not a libpod API (no Libpod-Api-Version header; a Docker socket?)"
    return ""


_TRANSIENT = ("connection refused", "no answer", "answered /_ping with HTTP")  # may change within seconds


async def discover(explicit: str, wait: float) -> str:
    """The first socket that answers; retries for ``wait`` seconds while some
    candidate is a socket that does not answer yet (e.g. a service restarting).
    One this user may not use (another user's) is no reason to wait."""
    deadline = time.monotonic() + wait
    while True:
        attempts = [Attempt(p, await probe(p)) for p in candidates(explicit)]
        for attempt in attempts:
            if not attempt.problem:
                return attempt.path
        starting = any(a.problem.startswith(_TRANSIENT) for a in attempts)
        if not starting or time.monotonic() >= deadline:
            raise NoPodmanSocket(attempts)
        await asyncio.sleep(0.5)


async def answers(path: str, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """Whether ``path`` answers ``/_ping`` within ``timeout`` s; gives up early once ``alive()`` is false."""
    deadline = time.monotonic() + timeout
    while alive():
        if not await probe(path):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)
    return False
