"""Podman's API when none is running: podmand starts the user's own service.

When discovery finds no answering socket, autostart is on, no socket was named
explicitly and ``podman`` is installed, podmand runs ``podman system service
--time=0`` in the user's runtime directory (rundir.py) as a supervised child:
it dies with podmand (PR_SET_PDEATHSIG), is restarted with backoff if it exits
while podmand serves (containers survive: conmon is independent of it), and is
stopped (SIGTERM, then SIGKILL) when podmand exits.

A first use of rootless Podman 4.3 with no storage.conf anywhere silently makes
a slow ``vfs`` store; when the store does not exist yet and nothing names a
driver, the service is started with ``--storage-driver=overlay`` instead.

With ``health_check_interval`` set podmand probes sandbox health itself
(driver/observer.py); with systemd present Podman would also run a transient
``podman healthcheck run`` timer per container with a healthcheck, so every check
ran twice (and 5.3.0-5.4.1 keep every result of an API-made container). Then the
service gets ``DISABLE_HC_SYSTEMD=true``, which Podman reads (libpod's
disableHealthCheckSystemd, since 1.2) before making one. Without it (the default)
an image's own HEALTHCHECK is Podman's alone to run, and its timers stay.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shutil
import signal
import stat
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import logs
from ..config import Settings, rundir
from ..errors import StartupError
from .discovery import NoPodmanSocket, answers, discover, podman_socket_in

log = logging.getLogger("podmand")
READY_TIMEOUT = 30.0  # seconds for a started service to answer /_ping (a first start creates the store)
STOP_TIMEOUT = 10.0  # seconds from SIGTERM to SIGKILL at podmand's exit
MAX_BACKOFF = 30.0
STABLE_AFTER = 60.0  # a service that ran this long before exiting restarts without delay growth
SYSTEM_STORAGE_CONFS = ("/etc/containers/storage.conf", "/usr/share/containers/storage.conf")
OVERLAY_FLAG = "--storage-driver=overlay"
_PR_SET_PDEATHSIG = 1


class AutostartError(StartupError):
    """Podman's API service could not be started; the message says why and how to fix it."""


# ---------------------------------------------------------------- storage guard (pure decisions)


@dataclass(frozen=True)
class StorageFacts:
    store: str  # the user's default graph root
    store_exists: bool
    driver_source: str  # what names a storage driver ("" when nothing does)


def storage_confs(environ: Mapping[str, str], home: str) -> list[str]:
    """The storage.conf files rootless Podman reads, most specific first."""
    if environ.get("CONTAINERS_STORAGE_CONF"):
        return [environ["CONTAINERS_STORAGE_CONF"]]
    config_home = environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return [os.path.join(config_home, "containers", "storage.conf"), *SYSTEM_STORAGE_CONFS]


def names_driver(text: str) -> bool:
    """Whether a storage.conf sets ``[storage] driver``; one that cannot be read counts (podmand
    leaves a configuration it does not understand to Podman)."""
    try:
        storage = tomllib.loads(text).get("storage", {})
    except tomllib.TOMLDecodeError:
        return True
    return isinstance(storage, dict) and bool(storage.get("driver"))


def default_store(environ: Mapping[str, str], home: str, uid: int) -> str:
    if uid == 0:  # rootful Podman's graph root
        return "/var/lib/containers/storage"
    data_home = environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    return os.path.join(data_home, "containers", "storage")


def storage_facts(environ: Mapping[str, str] | None = None, uid: int | None = None) -> StorageFacts:
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    store = default_store(env, home, os.geteuid() if uid is None else uid)
    source = "STORAGE_DRIVER" if env.get("STORAGE_DRIVER") else ""
    for path in storage_confs(env, home):
        if source:
            break
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if names_driver(text):
            source = path
    return StorageFacts(store, os.path.exists(store), source)


def storage_flags(facts: StorageFacts) -> list[str]:
    """``--storage-driver=overlay`` only for a store that does not exist yet and no configured driver."""
    return [] if facts.store_exists or facts.driver_source else [OVERLAY_FLAG]


# ---------------------------------------------------------------- the command (pure)


def why_not_start(settings: Settings, podman: str | None) -> str:
    """'' when podmand should start Podman's API itself, else why it does not."""
    if settings.podman_socket:
        return (
            "podmand starts Podman's API only when no socket is named, and one is "
            "(podman_socket: --podman-socket / OPENSHELL_PODMAN_SOCKET)"
        )
    if not settings.podman_autostart:
        return (
            "podmand did not start Podman's API: podman_autostart is off "
            "(--podman-autostart / PODMAND_PODMAN_AUTOSTART)"
        )
    if podman is None:
        return "podman is not installed (no 'podman' on PATH): install it (Debian/Ubuntu: apt-get install podman)"
    return ""


def service_argv(podman: str, socket_path: str, flags: list[str]) -> list[str]:
    return [podman, *flags, "system", "service", "--time=0", f"unix://{socket_path}"]


NO_HEALTH_TIMERS = ("DISABLE_HC_SYSTEMD", "true")  # when podmand probes: Podman's own timers would too


def service_env(environ: Mapping[str, str], runtime: str, *, podmand_probes: bool) -> dict[str, str]:
    """podmand's environment minus its own settings and systemd's hand-over variables (the
    service must not speak for podmand's unit), with the runtime directory Podman must agree on
    and, when podmand probes sandbox health itself, no healthcheck timers of Podman's own."""
    env = {
        k: v
        for k, v in environ.items()
        if not k.startswith(("OPENSHELL_", "PODMAND_", "LISTEN_")) and k != "NOTIFY_SOCKET"
    }
    env["XDG_RUNTIME_DIR"] = runtime
    if podmand_probes:
        env[NO_HEALTH_TIMERS[0]] = NO_HEALTH_TIMERS[1]
    return env


# Run in the child before it becomes podman: SIGTERM when podmand dies, however it dies
# (PR_SET_PDEATHSIG survives exec), and no start at all if podmand is already gone. A
# separate interpreter rather than preexec_fn: forking a process with gRPC's threads
# running is unsafe, while subprocess without preexec_fn spawns without a fork.
_BIND_TO_PARENT = (
    "import ctypes, os, sys\n"
    f"if ctypes.CDLL(None).prctl({_PR_SET_PDEATHSIG}, {int(signal.SIGTERM)}, 0, 0, 0) != 0 "
    "or os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def bound_to_parent(argv: list[str], parent: int) -> list[str]:
    """``argv`` run so that it dies with ``parent`` (the process spawning it)."""
    return [sys.executable, "-I", "-S", "-c", _BIND_TO_PARENT, str(parent), *argv]


# ---------------------------------------------------------------- the supervised child


class PodmanService:
    """One ``podman system service``: started, supervised, stopped.

    Rootless podman runs as two processes (the one started, and its child in the user
    namespace), so signals go to the process group (its own session), and stderr is a
    pipe of podmand's own: a child left behind holding it must not delay noticing an exit.
    Containers are unaffected: conmon runs in a session of its own."""

    def __init__(self, argv: list[str], env: dict[str, str], runtime: rundir.RuntimeDir) -> None:
        self.argv, self.env, self.runtime = argv, env, runtime
        self.socket_path = podman_socket_in(runtime)
        self.proc: asyncio.subprocess.Process | None = None
        self._group_killed = False  # the exited leader's group was killed: its pid is not ours any more
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._stopping = False
        self._reader: asyncio.Task[None] | None = None
        self._monitor: asyncio.Task[None] | None = None

    @property
    def overlay(self) -> bool:
        return OVERLAY_FLAG in self.argv

    async def start(self) -> None:
        """Spawn and wait until it answers /_ping; AutostartError (with its stderr) otherwise."""
        proc = await self.spawn()
        if await answers(self.socket_path, READY_TIMEOUT, lambda: proc.returncode is None):
            return
        if proc.returncode is None:
            await self._terminate(proc)
            raise AutostartError(self._failure(f"did not answer on {self.socket_path} within {READY_TIMEOUT:.0f} s"))
        self._kill_group_after_exit()
        await self._drain_stderr()
        raise AutostartError(self._failure(f"exited with status {proc.returncode}"))

    def _socket_dir(self) -> None:
        """The runtime directory checked on every (re)start (a /tmp one may have been cleaned
        away or replaced by another user's since), and ``podman/`` in it: ours, 0700, no symlink."""
        try:
            rundir.ensure(self.runtime)
        except rundir.RuntimeDirError as exc:
            raise AutostartError(str(exc)) from None
        path = os.path.dirname(self.socket_path)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise AutostartError(f"cannot create {path} for Podman's socket: {exc.strerror}") from None
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise AutostartError(f"{path} is a symlink, not a directory or not this user's; refusing "
                                 "to put Podman's socket there. Remove it")

    async def spawn(self) -> asyncio.subprocess.Process:
        self._socket_dir()
        await self._stop_reader()
        self.stderr.clear()
        read_end, write_end = os.pipe()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *bound_to_parent(self.argv, os.getpid()),
                env=self.env,
                cwd="/",  # rootless Podman returns to the caller's directory, which may be private
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=write_end,
                start_new_session=True,  # its own group; a terminal's Ctrl-C reaches podmand, which stops it
            )
            self._group_killed = False
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        self._reader = asyncio.create_task(self._read_stderr(read_end))
        return self.proc

    def _signal(self, sig: int) -> None:
        """To the service's process group, unless its leader was reaped and the group killed
        already: after that its pid may be reused by an unrelated process (group)."""
        if self.proc is not None and not self._group_killed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def _kill_group_after_exit(self) -> None:
        """Kill whatever the exited leader left in its group (its child in the user namespace may
        outlive it), once, right after the exit is seen: the group id stays reserved while members live."""
        self._signal(signal.SIGKILL)
        self._group_killed = True

    def _failure(self, what: str) -> str:
        said = " | ".join(self.stderr) or "nothing on stderr"
        text = f"podmand started Podman's API service ({' '.join(self.argv)}), but it {what}: {said}"
        if self.overlay:
            text += (
                ". podmand asked for the overlay storage driver because this user has no Podman store yet and "
                "no storage.conf names a driver (Podman would silently make a slow vfs store); native overlay "
                "needs Linux 5.13 or newer. Fix: install fuse-overlayfs and write ~/.config/containers/storage.conf "
                'with [storage] driver = "overlay" and [storage.options.overlay] mount_program = '
                '"/usr/bin/fuse-overlayfs", or accept vfs with driver = "vfs"'
            )
        return logs.redact(text)

    async def _read_stderr(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        try:
            async for raw in reader:
                line = logs.redact(raw.decode(errors="replace").rstrip())
                if line:
                    self.stderr.append(line)
                    log.debug("podman service: %s", line)
        finally:
            transport.close()

    async def _drain_stderr(self) -> None:
        """After an exit: its last lines, bounded (a process it left behind may hold the pipe open)."""
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), 2.0)

    async def _stop_reader(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    def supervise(self) -> None:
        self._monitor = asyncio.create_task(self._supervise(), name="podman-service")

    async def _supervise(self) -> None:
        """Restart the service whenever it exits while podmand serves, with backoff."""
        delay = 1.0
        while True:
            assert self.proc is not None
            started = time.monotonic()
            code = await self.proc.wait()
            self._kill_group_after_exit()
            if self._stopping:
                return
            if time.monotonic() - started >= STABLE_AFTER:
                delay = 1.0
            await self._drain_stderr()
            log.warning(
                "Podman's API service (pid %d) exited with status %s: %s; restarting it in %.0f s",
                self.proc.pid, code, " | ".join(self.stderr) or "nothing on stderr", delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF)
            try:
                await self.start()
            except (AutostartError, OSError) as exc:
                log.warning("restarting Podman's API service failed: %s", exc)
                continue
            log.info("restarted Podman's API service (pid %d) at %s", self.proc.pid, self.socket_path)

    async def _terminate(self, proc: asyncio.subprocess.Process) -> str:
        """SIGTERM to its group, wait bounded, then SIGKILL; says how it ended."""
        if proc.returncode is not None:
            self._kill_group_after_exit()  # a no-op when that was done already
            return f"had already exited with status {proc.returncode}"
        self._signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            how = "stopped"
        except TimeoutError:
            self._signal(signal.SIGKILL)  # the leader still lives: its group is still its own
            await proc.wait()
            how = f"killed (no exit within {STOP_TIMEOUT:.0f} s of SIGTERM)"
        self._kill_group_after_exit()  # the rest of its group, if anything outlived it
        return how

    async def stop(self) -> None:
        self._stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        if self.proc is None:
            return
        how = await self._terminate(self.proc)
        await self._stop_reader()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)  # ours: podman leaves it behind when it is killed
        log.info("Podman's API service (pid %d) %s", self.proc.pid, how)


# ---------------------------------------------------------------- the hook used by serve


def prepare(settings: Settings, environ: Mapping[str, str] | None = None) -> PodmanService:
    """The service podmand would start, or NoPodmanSocket's reason not to (as AutostartError)."""
    env = os.environ if environ is None else environ
    podman = shutil.which("podman", path=env.get("PATH") or os.defpath)
    why = why_not_start(settings, podman)
    if why:
        raise AutostartError(why)
    assert podman is not None
    resolved = rundir.resolve(env)
    try:
        runtime = rundir.ensure(resolved)
    except rundir.RuntimeDirError as exc:
        raise AutostartError(str(exc)) from None
    sock = podman_socket_in(resolved)
    flags = storage_flags(storage_facts(env)) if os.geteuid() != 0 else []
    probes = settings.health_check_interval > 0
    return PodmanService(service_argv(podman, sock, flags), service_env(env, runtime, podmand_probes=probes), resolved)


@contextlib.asynccontextmanager
async def podman_api(settings: Settings) -> AsyncIterator[str]:
    """The socket of an answering Podman API: discovered, or a service started here and
    stopped when the block ends."""
    try:
        found = await discover(settings.podman_socket, settings.podman_wait)
    except NoPodmanSocket as exc:
        try:
            service = prepare(settings)
        except AutostartError as why:
            raise NoPodmanSocket(exc.attempts, str(why)) from None
    else:
        yield found
        return
    try:
        await service.start()
    except BaseException as exc:  # a cancellation (Ctrl-C) during the wait for it to answer, too
        await asyncio.shield(service.stop())
        if isinstance(exc, OSError):
            raise AutostartError(f"cannot run {service.argv[0]}: {exc.strerror or exc}") from None
        raise
    assert service.proc is not None
    storage = " (new store: overlay)" if service.overlay else ""
    log.info("started Podman's API service (pid %d) at %s%s", service.proc.pid, service.socket_path, storage)
    service.supervise()
    try:
        yield service.socket_path
    finally:
        await service.stop()
