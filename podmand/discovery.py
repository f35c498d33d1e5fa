"""Finding the Podman API socket, and saying exactly why when there is none."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from dataclasses import dataclass

from .podman import PodmanClient, PodmanUnavailable


@dataclass(frozen=True)
class Attempt:
    path: str
    problem: str  # "" when the socket answered


class NoPodmanSocket(Exception):
    def __init__(self, attempts: list[Attempt]) -> None:
        lines = [f"  {a.path}: {a.problem}" for a in attempts]
        super().__init__(
            "no responsive Podman API socket found; tried:\n"
            + "\n".join(lines)
            + "\nstart one with 'podman system service --time=0 unix://<path>' "
            "(or 'systemctl --user enable --now podman.socket') and set OPENSHELL_PODMAN_SOCKET"
        )
        self.attempts = attempts


def candidates(explicit: str, environ: dict[str, str] | None = None) -> list[str]:
    """The upstream probe order, plus the rootful socket (upstream forgets it)."""
    env = os.environ if environ is None else environ
    if explicit:
        return [explicit.removeprefix("unix://")]
    out = []
    if env.get("XDG_RUNTIME_DIR"):
        out.append(os.path.join(env["XDG_RUNTIME_DIR"], "podman", "podman.sock"))
    out.append(f"/run/user/{os.geteuid()}/podman/podman.sock")
    home = env.get("HOME") or os.path.expanduser("~")
    out.append(os.path.join(home, ".local", "share", "containers", "podman", "machine", "podman.sock"))
    out.append("/run/podman/podman.sock")
    return list(dict.fromkeys(out))


async def probe(path: str) -> str:
    """'' when ``path`` is a libpod API that answers ``/_ping``, else why not."""
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


async def discover(explicit: str, wait: float) -> str:
    """The first socket that answers; retries for ``wait`` seconds while some
    candidate exists but does not answer yet (e.g. a service restarting)."""
    deadline = time.monotonic() + wait
    while True:
        attempts = [Attempt(p, await probe(p)) for p in candidates(explicit)]
        for attempt in attempts:
            if not attempt.problem:
                return attempt.path
        exists = any(a.problem not in ("does not exist",) for a in attempts)
        if not exists or time.monotonic() >= deadline:
            raise NoPodmanSocket(attempts)
        await asyncio.sleep(0.5)
