"""``podmand serve``: the process around the servicer.

Locks the state directory (one podmand per state dir), finds Podman, binds
the driver socket safely (parent 0700, socket 0600, only our own stale socket
replaced) behind the peer check (peers.py), serves, and on SIGTERM/SIGINT stops
accepting, finishes in-flight RPCs, ends watch streams and removes the socket.
A start-up failure leaves nothing behind: no socket, no directory podmand
created, the state-directory lock released.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import socket
import stat
from pathlib import Path

import grpc
import msgspec
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from . import __version__, logs, rootfs, rundir
from ._proto import compute_driver_pb2_grpc
from .autostart import AutostartError, podman_api
from .config import ConfigError, Settings, default_socket, default_state_dir, startup_warnings
from .decoding import DecodeRequests
from .driver import Driver
from .files import ensure_dir
from .hostpaths import state_dir_problem
from .hub import Hub, Inbox
from .limits import raise_nofile_limit
from .liveness import Liveness
from .negotiation import capabilities
from .notify import Notifier
from .peers import MAX_UNIX_PATH, PeerGate, deny_server, private_dir, remove_private_dir
from .podman import Info, PodmanClient
from .servicer import ComputeDriverServicer

log = logging.getLogger("podmand")
SERVICE = "openshell.compute.v1.ComputeDriver"
LOCK_FILE = "podmand.lock"


class StartupError(Exception):
    """podmand cannot start; the message says why (``podmand: <message>``, exit 1)."""


SHUTDOWN_DEADLINE = 10.0  # seconds for background work to end after the RPCs have


class SocketError(StartupError):
    """The driver socket path cannot be used safely."""


class StateDirError(StartupError):
    """Podman cannot see the state directory at the path podmand uses."""


def holder_record(pid: int, socket_path: str) -> bytes:
    """What the lock file says about its holder, for the refusal message of the next one."""
    return f"pid={pid}\nsocket={socket_path}\n".encode()


def describe_holder(record: str) -> str:
    fields = dict(line.split("=", 1) for line in record.splitlines() if "=" in line)
    if not fields.get("pid"):
        return "its PID is not recorded yet"
    where = f", driver socket {fields['socket']}" if fields.get("socket") else ""
    return f"PID {fields['pid']}{where}"


def lock_state_dir(state_dir: Path, socket_path: str) -> int:
    """Hold an exclusive flock on ``<state>/podmand.lock`` for the life of the process:
    two podmands on one state dir would collect each other's token files as garbage.
    The kernel drops the lock when its holder dies, so a stale file never blocks."""
    try:
        ensure_dir(state_dir)
        fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StateDirError(f"state directory {state_dir} is not usable: {exc.strerror}: {exc.filename}") from exc
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


def prepare_socket(path: str) -> list[Path]:
    """Make the parent 0700 and ours; clear a stale socket of ours, refuse anything else.
    Returns the directories it created (outermost first), for removal at exit."""
    parent = Path(path).parent
    if parent.is_symlink():
        raise SocketError(f"driver socket directory {parent} is a symlink; refusing to use it")
    created = [p for p in (*reversed(parent.parents), parent) if not p.exists()]
    try:
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        remove_dirs(created)
        raise SocketError(
            f"cannot create the driver socket directory {parent}: {exc.strerror}; choose a --socket "
            "(OPENSHELL_COMPUTE_DRIVER_SOCKET) in a directory this user may create or owns"
        ) from None
    st = parent.stat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SocketError(f"driver socket directory {parent} must be a directory owned by uid {os.geteuid()}")
    os.chmod(parent, 0o700)
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


def _dump_tasks() -> None:
    """SIGUSR1: log every asyncio task's stack, for diagnosing a stuck daemon."""
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=8)
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
        log.warning("task %s: %s", task.get_name(), where or "(not started)")


def socket_path_problem(path: str) -> str | None:
    """Checked before anything is created: grpc would fail late, with a traceback."""
    size = len(os.fsencode(path))
    if size > MAX_UNIX_PATH:
        return (
            f"driver socket path {path!r} is {size} bytes; Unix sockets allow at most {MAX_UNIX_PATH} "
            "(choose a shorter --socket / OPENSHELL_COMPUTE_DRIVER_SOCKET)"
        )
    return None


async def read_info(podman: PodmanClient, path: str) -> Info:
    try:
        return await podman.info()
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise StartupError(
            f"{path} answered /info with something that is not Podman's system info ({exc}); "
            "is it a libpod API socket?"
        ) from None


def remove_dirs(created: list[Path]) -> None:
    """Remove the directories podmand created for its socket, deepest first, if empty."""
    for path in reversed(created):
        with contextlib.suppress(OSError):
            path.rmdir()


async def serve(settings: Settings) -> int:
    logs.setup(settings.log_level, settings.log_format)
    for warning in startup_warnings(settings, os.environ):
        log.warning("%s", warning)
    state_dir = Path(settings.state_dir or default_state_dir())
    socket_path = settings.socket.removeprefix("unix://") or default_socket()
    problem = socket_path_problem(socket_path)
    if problem:
        raise SocketError(problem)
    raise_nofile_limit()
    notifier = Notifier.from_environ(os.environ)  # before any child process is started
    lock = lock_state_dir(state_dir, socket_path)
    try:
        return await _serve(settings, state_dir, socket_path, notifier)
    finally:
        unlock_state_dir(lock)


async def _serve(settings: Settings, state_dir: Path, socket_path: str, notifier: Notifier) -> int:
    """Discovers Podman's API, or starts (and at exit stops) the user's own: autostart.py."""
    try:
        rundir.ensure_holding(socket_path)
        async with podman_api(settings) as podman_path:
            podman = PodmanClient(podman_path)
            try:
                return await _serve_with(settings, state_dir, socket_path, podman, podman_path, notifier)
            finally:
                await podman.close()
    except (AutostartError, rundir.RuntimeDirError) as exc:
        raise StartupError(str(exc)) from None


async def _serve_with(
    settings: Settings, state_dir: Path, socket_path: str, podman: PodmanClient, podman_path: str,
    notifier: Notifier,
) -> int:
    info = await read_info(podman, podman_path)
    rootless = info.host.security.rootless
    if settings.userns_base == "keep-id" and not rootless:
        raise ConfigError("invalid setting userns (--userns / OPENSHELL_PODMAN_USERNS): keep-id needs rootless Podman")
    try:
        inbox = Inbox()  # the driver's event sink and the hub's input: made first, given to both
        driver = Driver(settings, podman, state_dir, inbox)
        driver.files.setup()
    except OSError as exc:
        raise StateDirError(f"state directory {state_dir} is not usable: {exc.strerror}: {exc.filename}") from exc
    problem = await state_dir_problem(podman, state_dir)
    if problem:
        raise StateDirError(problem)
    rootfs.prepare_staging(settings, state_dir)  # before the capabilities advertise it
    hub = Hub(podman, driver, inbox, buffer=settings.watch_buffer, resync=settings.resync_interval)
    stop = asyncio.Event()
    enforced = not (rootless and info.host.cgroupVersion == "v1")
    servicer = ComputeDriverServicer(driver, hub, capabilities(settings, limits_enforced=enforced))

    server = grpc.aio.server(interceptors=(DecodeRequests(),))
    compute_driver_pb2_grpc.add_ComputeDriverServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    # Reflection lets operators poke the driver with grpcurl without the protos.
    reflection.enable_server_reflection((SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)

    # The public socket is podmand's peer gate; the servers listen on private sockets behind it.
    created = prepare_socket(socket_path)
    internal = None
    try:
        internal = private_dir(socket_path)
        allowed_path, denied_path = str(internal / "grpc.sock"), str(internal / "deny.sock")
        old_umask = os.umask(0o177)
        try:
            server.add_insecure_port(f"unix://{allowed_path}")
            deny = deny_server(denied_path)
        finally:
            os.umask(old_umask)
        if settings.listen_tcp:  # loopback development only: no peer check over TCP
            server.add_insecure_port(settings.listen_tcp)
    except BaseException:
        if internal is not None:
            remove_private_dir(internal)
        remove_dirs(created)
        raise
    gate = PeerGate(socket_path, allowed_path, denied_path, own_uid=os.geteuid(),
                    allowed_uids=settings.allowed_peer_uids)

    liveness = Liveness(settings.podman_down_grace)
    hub.link = lambda up: liveness.up() if up else liveness.down()

    async def publish(serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE):
            await health_servicer.set(name, status)

    liveness_task: asyncio.Task[None] | None = None
    hub_task = asyncio.create_task(hub.run())

    # Without the hub no watch stream can work: a crashed hub stops the server.
    def hub_ended(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.critical("the watch hub crashed; shutting down", exc_info=task.exception())
            stop.set()

    hub_task.add_done_callback(hub_ended)
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        """The first SIGTERM/SIGINT drains; a second one ends podmand at once."""
        if stop.is_set():
            log.warning("second signal: exiting without finishing")
            os._exit(1)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
    try:
        await asyncio.wait_for(hub.connected.wait(), 10.0)
        await server.start()
        await deny.start()
        await gate.start()
        log.debug("driver socket %s is spliced to %s (refused peers: %s)", socket_path, allowed_path, denied_path)
        resumed = await driver.resume()
        await publish(True)
        liveness_task = asyncio.create_task(liveness.run(publish))
        log.info(
            "podmand %s ready: serving unix://%s%s (Podman %s at %s, %s, userns=%s, state %s%s)",
            __version__,
            socket_path,
            f" and {settings.listen_tcp}" if settings.listen_tcp else "",
            info.version.version,
            podman_path,
            "rootless" if rootless else "rootful",
            settings.userns,
            state_dir,
            f", resumed {resumed} create(s)" if resumed else "",
        )
        notifier.send("READY=1", f"STATUS=serving unix://{socket_path}")
        await stop.wait()
        log.info("shutting down: finishing in-flight RPCs")
    finally:
        notifier.send("STOPPING=1", "STATUS=shutting down")
        if liveness_task is not None:
            liveness_task.cancel()
        await health_servicer.enter_graceful_shutdown()  # NOT_SERVING from now on, whatever Podman does
        hub.close()
        gate.stop_accepting()
        await server.stop(grace=10.0)
        await deny.stop(None)
        gate.close()
        # The hub first (it would start new work), then background work, bounded:
        # a cancelled task's clean-up may wait on a slow Podman, and durable intent
        # plus garbage collection finish what is cut short.
        hub_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hub_task
        try:
            await asyncio.wait_for(driver.close(), SHUTDOWN_DEADLINE)
        except TimeoutError:
            log.warning("background work did not end within %ss; leaving it to the next start", SHUTDOWN_DEADLINE)
        remove_private_dir(internal)
        # The socket's directory stays: a gateway may bind-mount it, and removing it
        # would leave that mount pointing at a deleted directory across a restart.
    log.info("stopped")
    return 0
