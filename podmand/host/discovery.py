"""Finding the Podman API socket the way Podman's own CLI finds its service, and saying
exactly why when there is none.

The candidates, in order (``plan``): podmand's own ``podman_socket`` alone when set; else
``CONTAINER_CONNECTION`` (a connection by name), else ``CONTAINER_HOST`` (a URI), which
Podman 5 ranks in that order (cmd/podman/root.go ``setupRemoteConnection``; Podman 4 ranked
``CONTAINER_HOST`` first). Any of these names the socket: nothing else is tried and
podmand starts no service of its own. Otherwise the default connection (connections.py),
the other podman machines' sockets, then the well-known places: the user's runtime
directories, the podman machine symlink, the rootful socket.

Every candidate is listed with why it failed (``NoPodmanSocket``, and doctor's socket
check, from the same ``Attempt`` lines). The planted-socket rules apply to each. A socket
podmand finds (a well-known place, a connection's, a machine's) is used only when no other
user can change where its path leads: nothing under a runtime directory of this user's that
rundir passes over (``runtime_dir_problem``); from / down every directory is this user's or
root's and writable by no one else (a sticky one, as /tmp, excepted), every symlink on the
way is theirs, and the socket itself is theirs (root's for the rootful one) and not a
symlink (``path_problem``): whoever could swap it would get podmand's registry credentials
on the next connection. A socket the operator names (``Candidate.named``) is taken as
named, symlinks followed, its owner checked when it is a well-known place; and nothing in
a fallback runtime directory another user could have made is ever contacted.
"""

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
from . import connections
from .connections import Candidate


@dataclass(frozen=True)
class Attempt:
    path: str
    problem: str  # "" when the socket answered
    source: str = ""  # where the candidate came from ("": a well-known place)
    machine: str = ""  # the podman machine whose socket it is

    def line(self) -> str:
        where = f" ({self.source})" if self.source else ""
        return f"{self.path}{where}: {self.problem}"


class NoPodmanSocket(StartupError):
    """``why_not_started``: why podmand did not start Podman's API service itself."""

    def __init__(self, attempts: list[Attempt], why_not_started: str = "") -> None:
        lines = [f"  {a.line()}" for a in attempts]
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
    """The well-known places, in the upstream probe order, plus the rootful socket (upstream
    forgets it); only ``explicit`` when it is set."""
    env = os.environ if environ is None else environ
    if explicit:
        return [explicit.removeprefix("unix://")]
    return list(dict.fromkeys([*_users_own(env, os.geteuid()), ROOTFUL_SOCKET]))


CONNECTION, HOST = "CONTAINER_CONNECTION", "CONTAINER_HOST"


def named_by(explicit: str, environ: Mapping[str, str] | None = None) -> str:
    """What names the socket, when something does ('' when podmand looks for one)."""
    env = os.environ if environ is None else environ
    if explicit:
        return "podman_socket (--podman-socket / OPENSHELL_PODMAN_SOCKET)"
    return next((name for name in (CONNECTION, HOST) if env.get(name, "").strip()), "")


@dataclass(frozen=True)
class Plan:
    candidates: list[Candidate]
    named_by: str = ""  # when set, the candidates are all there is: no fallback, no autostart


def plan(explicit: str, environ: Mapping[str, str] | None = None,
         inspect: connections.Inspect = connections.run_inspect) -> Plan:
    """Every candidate, in Podman's order (the module's docstring). ``inspect`` answers for
    ``podman machine inspect`` (injected by tests: no machine runs here)."""
    env = os.environ if environ is None else environ
    uid = os.geteuid()
    named = named_by(explicit, env)
    if explicit:
        return Plan([Candidate(explicit.removeprefix("unix://"), named=True)], named)
    name = env.get(CONNECTION, "").strip()
    if named == HOST:  # no configuration file has a say
        sshkey = env.get("CONTAINER_SSHKEY", "")
        return Plan([connections.for_uri(env[HOST], HOST, env, uid, identity=sshkey, named=True)], named)
    conns = connections.load(env, uid)
    found = [Candidate(i.path, "Podman's configuration", refused=i.why) for i in conns.ignored]
    if name:
        return Plan([*found, _connection(conns, name, f"connection {name!r} ({CONNECTION})", env, uid, inspect,
                                         named=True)], named)
    if conns.default:
        found.append(_connection(conns, conns.default, f"default connection {conns.default!r}", env, uid, inspect))
    for other, dest in sorted(conns.named.items()):
        if dest.is_machine and other != conns.default:
            found.append(connections.machine_candidate(other, f"connection {other!r}", env, uid, inspect))
    found += [Candidate(path) for path in candidates("", env)]
    unique = {(c.path, c.refused): c for c in reversed(found)}  # the first of each path stays
    return Plan([c for c in found if unique[(c.path, c.refused)] is c])


def _connection(conns: connections.Connections, name: str, source: str, env: Mapping[str, str], uid: int,
                inspect: connections.Inspect, *, named: bool = False) -> Candidate:
    dest = conns.named.get(name)
    if dest is None:
        return Candidate(name, source, refused=f"no such connection (looked in {connections.where(env)})")
    return connections.for_connection(name, dest, source, env, uid, inspect, named=named)


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
    return _directory(directory, lambda st: rundir.fallback_problem(st, uid))


def _directory(directory: str, problem_of: Callable[[os.stat_result], str]) -> str:
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot stat {directory}: {exc.strerror}"
    problem = problem_of(st)
    return f"not used: its directory {directory} {problem} (another user could have planted it)" if problem else ""


def runtime_dir_problem(path: str, env: Mapping[str, str], uid: int,
                        lstat: Callable[[str], os.stat_result] = os.lstat) -> str:
    """'' unless ``path`` lies in ``XDG_RUNTIME_DIR`` or ``/run/user/<uid>`` and that directory
    is one rundir passes over (not this user's directory): Podman would not use it, and whoever
    owns it decides what its ``podman/podman.sock`` is."""
    for name, directory in (("XDG_RUNTIME_DIR", env.get("XDG_RUNTIME_DIR", "")), ("", f"/run/user/{uid}")):
        if directory and path.startswith(directory.rstrip("/") + "/"):
            problem = rundir.own_dir_problem(directory, uid, lstat)
            if problem == "does not exist":
                return problem
            if problem:
                which = f"{name}={directory}" if name else directory
                return f"not used: its runtime directory {which} {problem} (another user could have planted it)"
    return ""


def directory_problem(st: os.stat_result, uid: int) -> str:
    """'' when a directory (from lstat) on a found socket's path is one only this user or root
    may change: theirs, and writable by no one else unless sticky (others may add entries to
    /tmp, but not move or replace this user's)."""
    if st.st_uid not in (uid, 0):
        return f"is owned by uid {st.st_uid}, not this user (uid {uid}) or root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


NAME_IT = "--podman-socket / OPENSHELL_PODMAN_SOCKET, CONTAINER_HOST or CONTAINER_CONNECTION"


def socket_problem(st: os.stat_result, owners: set[int], uid: int) -> str:
    """'' when a found path's last component (from lstat) is a socket of one of ``owners``."""
    if stat.S_ISLNK(st.st_mode):
        return f"not used: it is a symlink; podmand follows one only to a socket it is given ({NAME_IT})"
    if not stat.S_ISSOCK(st.st_mode):
        return "exists but is not a socket"
    if st.st_uid not in owners:
        whose = "root" if owners == {0} else f"this user (uid {uid}) or root"
        return f"not used: the socket is owned by uid {st.st_uid}, not {whose} (another user could impersonate Podman)"
    return ""


MAX_LINKS = 40  # the kernel's own limit on symlinks in one lookup


def path_problem(path: str, owners: set[int], uid: int, lstat: Callable[[str], os.stat_result] = os.lstat,
                 readlink: Callable[[str], str] = os.readlink) -> str:
    """'' when no user but this one and root can change where ``path`` leads, and it leads to a
    socket of ``owners``; else why not. Each component from / is looked at with lstat: a
    symlink on the way (this user's or root's) is followed as the kernel would, each directory
    is checked by ``directory_problem`` and the last component by ``socket_problem``."""
    pending = [part for part in os.path.abspath(path).split("/") if part]
    here, links = "/", 0
    st = _step(here, lstat)
    if isinstance(st, str) or directory_problem(st, uid):
        return st if isinstance(st, str) else f"not used: / {directory_problem(st, uid)}"
    while pending:
        name = pending.pop(0)
        if name in (".", ".."):
            here = os.path.dirname(here) if name == ".." else here
            continue
        step = os.path.join(here, name)
        st = _step(step, lstat)
        if isinstance(st, str):
            return st
        if not pending:
            return socket_problem(st, owners, uid)
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if st.st_uid not in (uid, 0) or links > MAX_LINKS:
                why = f"is owned by uid {st.st_uid}" if links <= MAX_LINKS else "is one symlink too many"
                return f"not used: the symlink {step} on its path {why} (another user could redirect it)"
            try:
                target = readlink(step)
            except OSError as exc:
                return f"cannot read the symlink {step}: {exc.strerror}"
            pending[:0] = [part for part in target.split("/") if part]
            here = "/" if target.startswith("/") else here
            continue
        if not stat.S_ISDIR(st.st_mode):
            return f"does not exist ({step} is not a directory)"
        why = directory_problem(st, uid)
        if why:
            return f"not used: {step} on its path {why} (another user could plant or swap the socket)"
        here = step
    return "exists but is not a socket"  # the path was /


def _step(path: str, lstat: Callable[[str], os.stat_result]) -> os.stat_result | str:
    """lstat's answer, or why there is none (worded as for a missing socket)."""
    try:
        return lstat(path)
    except FileNotFoundError:
        return "does not exist"
    except PermissionError:
        return "permission denied (cannot reach the path)"
    except OSError as exc:
        return f"cannot stat {path}: {exc.strerror}"


async def probe(path: str) -> str:
    """'' when ``path`` is a libpod API that answers ``/_ping``, else why not. A socket in a
    well-known place that another user could have put there is never connected to."""
    return await check(Candidate(path, named=True))


async def check(candidate: Candidate) -> str:
    """'' when the candidate answers, else why not (the planted-socket rules first)."""
    if candidate.refused:
        return candidate.refused
    path, env, uid = candidate.path, os.environ, os.geteuid()
    owners = socket_owners(path, env, uid)
    unsafe = fallback_problem(path, env, uid)
    if not unsafe and candidate.named:  # taken as named: symlinks followed
        st = _step(path, os.stat)
        unsafe = st if isinstance(st, str) else socket_problem(st, {st.st_uid} if owners is None else owners, uid)
    elif not unsafe:  # found: nobody else may change where its path leads
        unsafe = runtime_dir_problem(path, env, uid) or path_problem(path, owners or {uid, 0}, uid)
    if unsafe:
        return unsafe
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


async def attempts(found: Plan) -> list[Attempt]:
    """Each candidate tried, with why it failed ('' for one that answers)."""
    return [Attempt(c.path, await check(c), c.source, c.machine) for c in found.candidates]


_TRANSIENT = ("connection refused", "no answer", "answered /_ping with HTTP")  # may change within seconds


async def discover(explicit: str, wait: float, environ: Mapping[str, str] | None = None,
                   inspect: connections.Inspect = connections.run_inspect) -> Attempt:
    """The first candidate that answers; retries for ``wait`` seconds while some
    candidate is a socket that does not answer yet (e.g. a service restarting).
    One this user may not use (another user's) is no reason to wait."""
    found = plan(explicit, environ, inspect)
    deadline = time.monotonic() + wait
    while True:
        tried = await attempts(found)
        for attempt in tried:
            if not attempt.problem:
                return attempt
        starting = any(a.problem.startswith(_TRANSIENT) for a in tried)
        if not starting or time.monotonic() >= deadline:
            raise NoPodmanSocket(tried)
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
