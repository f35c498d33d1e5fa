"""``podmand serve``: start-up, serving, shutdown.

Start-up acquires what serving needs, in order, and hands each piece to one exit
stack together with the step that undoes it: the state-directory lock (statedir.py),
Podman's API (found, or started here and stopped at exit: autostart.py) and its
client, the driver, the watch hub, the driver socket's directory and the private
sockets behind the peer gate (socketpath.py, peers.py), the gRPC servers, the health
status and systemd's readiness (notify.py). The socket accepts before the slow probes
have answered (Podman's ``/info``, whether Podman sees the state directory, the event
stream, the volumes recording creates to resume): health says NOT_SERVING and each RPC
waits for what it needs (servicer.py's ``Readiness``) until they have; then SERVING,
the ready line and READY=1, and only then the check of whether sandboxes reach the
gateway (its warning, from a thread that never holds up the exit) and the ``.pyc``
files a cold start of the pex left for then (bytecode.py). Shutdown is that
stack unwinding: release RPCs still waiting for start-up, report NOT_SERVING,
end watch streams, stop accepting, finish in-flight RPCs within a grace, stop the
hub, bound background work (the image readers it leaves removed within that bound),
remove the sockets, stop an autostarted Podman, release the lock. A failed start
unwinds the same way and leaves nothing behind, not even a socket directory podmand
created; a stop asked for during start-up abandons it.
How a stop is asked for and forced (signals): shutdown.py. With ``otlp_endpoint``
set, traces are on for the whole run and flushed after it (rpcspans.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from . import __version__, bytecode, logs, rpcspans
from ._proto import compute_driver_pb2_grpc
from .config import Settings, invalid, rundir, startup_warnings
from .decoding import DecodeRequests
from .driver import Driver
from .errors import DriverError, StartupError
from .host import enforcement, eventproof, hostgateway, netfacts
from .host.autostart import podman_api
from .host.limits import raise_nofile_limit
from .host.notify import Notifier
from .host.sharedpaths import state_dir_problem
from .host.shutdown import Stop, capture_signals
from .host.socketpath import SocketError, prepare_socket, remove_dirs, socket_path_problem
from .host.statedir import StateDirError, lock_state_dir, unlock_state_dir, unusable
from .libpod import Info, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable
from .negotiation import capabilities
from .sandbox import rootfs
from .security.peers import PeerGate, deny_server, private_dir, remove_private_dir, unmapped_uid
from .servicer import ComputeDriverServicer, Readiness
from .watch.hub import Hub
from .watch.inbox import Inbox
from .watch.liveness import Liveness

log = logging.getLogger("podmand")
T = TypeVar("T")
SERVICE = "openshell.compute.v1.ComputeDriver"
# Seconds for Podman's event stream to open at start: more than the proof's deadline, after
# which a stream Podman does not answer (5.1-5.2, silent) is served without the answer.
CONNECT_TIMEOUT = 10.0
GRACE = 10.0  # seconds for in-flight RPCs to finish once a stop is asked for
SHUTDOWN_DEADLINE = 10.0  # seconds for background work to end after the RPCs have


async def serve(settings: Settings) -> int:
    """The process around the server; its exit status."""
    logs.setup(settings.log_level, settings.log_format)
    for warning in startup_warnings(settings, os.environ):
        log.warning("%s", warning)
    traces = rpcspans.start(settings)  # None without otlp_endpoint
    server = Server(settings)
    try:
        status = await server.run()
    finally:
        if traces is not None:  # what is left is exported (within tracing.EXPORT_TIMEOUT)
            await asyncio.to_thread(traces.close)
    if server.stop.forced.is_set():
        # The sockets and the lock are gone; the loop's own clean-up would wait for
        # whatever work the second signal told podmand to abandon.
        logging.shutdown()
        os._exit(status)
    return status


async def read_info(podman: PodmanClient, path: str) -> Info:
    try:
        return await podman.info()
    except PodmanUnreadable as exc:
        raise StartupError(
            f"{path} answered /info with something that is not Podman's system info ({exc}); "
            "is it a libpod API socket?"
        ) from None


def grpc_server(servicer: ComputeDriverServicer) -> tuple[Any, Any]:
    """The driver service, health and reflection on one server (not yet listening)."""
    server = grpc.aio.server(interceptors=(*rpcspans.interceptors(), DecodeRequests()))
    compute_driver_pb2_grpc.add_ComputeDriverServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    # Reflection lets operators poke the driver with grpcurl without the protos.
    reflection.enable_server_reflection((SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    return server, health_servicer


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Sockets grpc binds are created 0600."""
    old = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(old)


class Server:
    """One run of ``podmand serve``: ``run`` starts, serves until stopped, shuts down."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state_dir = Path(settings.state_dir)
        self.socket_path = settings.socket
        self.stop = Stop()
        self.ready = False

    async def run(self) -> int:
        with capture_signals(self.stop.on_signal):
            async with contextlib.AsyncExitStack() as stack:
                if await self.stop.unless_asked(self.startup(stack)):
                    await self.stop.asked.wait()
                    log.info("shutting down: finishing in-flight RPCs")
            log.info("stopped")
        return self.stop.status

    async def startup(self, stack: contextlib.AsyncExitStack) -> None:
        """Everything serving needs, each undo on ``stack``. What the layers below raise
        while podmand starts is a start-up failure: one ``podmand:`` line."""
        try:
            await self._startup(stack)
        except DriverError as exc:
            raise StartupError(exc.message) from None
        except (PodmanError, PodmanUnavailable) as exc:
            raise StartupError(f"Podman failed during start-up: {exc}") from None
        except PodmanUnreadable as exc:
            raise StartupError(f"Podman answered something podmand cannot read: {exc}") from None

    async def _startup(self, stack: contextlib.AsyncExitStack) -> None:
        settings, state_dir, socket_path = self.settings, self.state_dir, self.socket_path
        problem = socket_path_problem(socket_path)
        if problem:
            raise SocketError(problem)
        raise_nofile_limit()
        notifier = Notifier.from_environ(os.environ)  # before any child process is started
        stack.callback(unlock_state_dir, lock_state_dir(state_dir, socket_path))
        rundir.ensure_holding(socket_path)
        api = await stack.enter_async_context(podman_api(settings))
        podman_path = api.path
        if api.machine and not settings.host_gateway_ip:
            log.info("Podman is podman machine %r: host_gateway_ip defaults to gvproxy's %s", api.machine,
                     hostgateway.GVPROXY_HOST)
        self.settings = settings = hostgateway.for_machine(settings, api.machine)
        podman = PodmanClient(podman_path, log_size_max=settings.log_size_max)
        rpcspans.observe(podman)
        stack.push_async_callback(podman.close)
        info = self._meanwhile(stack, read_info(podman, podman_path))
        inbox = Inbox()  # the driver's event sink and the hub's input: made first, given to both
        driver = self._driver(podman, inbox)
        visible = self._meanwhile(stack, state_dir_problem(podman, state_dir))
        recorded = self._meanwhile(stack, driver.recorded())  # what resume() finishes
        hub = Hub(podman, driver, inbox, buffer=settings.watch_buffer, resync=settings.resync_interval,
                  prove=functools.partial(eventproof.cause, podman, state_dir),
                  silent_resync=settings.resync_interval_silent)
        readiness = Readiness()
        guess = enforcement.predicted(podman_path)
        if guess is not None:
            readiness.advertise(capabilities(settings, limits=guess))
        server, health_servicer = grpc_server(ComputeDriverServicer(driver, hub, readiness))
        gate, deny = self._bind(stack, server)

        liveness = Liveness(settings.podman_down_grace)
        hub.link = lambda up: liveness.up() if up else liveness.down()

        async def publish(serving: bool) -> None:
            status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
            for name in ("", SERVICE):
                await health_servicer.set(name, status)

        self._run_hub(stack, hub, driver)
        stack.push_async_callback(self._close_front, server, deny, gate)
        await publish(False)  # until start-up is done
        await server.start()
        await deny.start()
        await gate.start()
        stack.push_async_callback(end_serving, health_servicer, hub)
        stack.push(abandoning(readiness))
        log.debug("accepting on unix://%s while start-up finishes", socket_path)

        found = await info
        hub.subscriber.event_logger = found.host.eventLogger
        rootless = found.host.security.rootless
        if settings.userns_base == "keep-id" and not rootless:
            raise invalid("userns", "keep-id needs rootless Podman")
        enforced = enforcement.from_info(found)
        if guess is None or guess != enforced:
            if guess is not None:
                log.warning("Podman's /info says %s, not as predicted; GetCapabilities says so from now on",
                            enforced.describe())
            readiness.advertise(capabilities(settings, limits=enforced))
        problem = await visible
        if problem:
            raise StateDirError(problem)
        await self._connected(hub)
        resumed = await driver.resume(await recorded)
        readiness.finish()
        await publish(True)
        liveness_task = asyncio.create_task(liveness.run(publish))
        stack.callback(liveness_task.cancel)
        log.info(
            "podmand %s ready: serving unix://%s%s (Podman %s at %s, %s, userns=%s, state %s%s)",
            __version__,
            socket_path,
            f" and {settings.listen_tcp}" if settings.listen_tcp else "",
            found.version.version,
            podman_path,
            "rootless" if rootless else "rootful",
            settings.userns,
            state_dir,
            f", resumed {resumed} create(s)" if resumed else "",
        )
        notifier.send("READY=1", f"STATUS=serving unix://{socket_path}")
        stack.callback(notifier.send, "STOPPING=1", "STATUS=shutting down")
        self.ready = True
        bytecode.write_deferred()  # a cold start of the pex left its .pyc files for now
        self._meanwhile(stack, warn_unreached(settings))  # after SERVING: it may resolve a name

    def _meanwhile(self, stack: contextlib.AsyncExitStack, probe: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A probe running while the socket already accepts (or, the gateway-reach check,
        while serving); cancelled with the stack if still running (its failure is then moot:
        marked retrieved)."""
        task = asyncio.ensure_future(probe)
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        stack.push_async_callback(cancel_and_wait, task)
        return task

    def _driver(self, podman: PodmanClient, inbox: Inbox) -> Driver:
        """The driver, once its state directory is usable (whether Podman sees it is a probe)."""
        settings, state_dir = self.settings, self.state_dir
        try:
            driver = Driver(settings, podman, state_dir, inbox)
            driver.files.setup()
        except OSError as exc:
            raise unusable(state_dir, exc) from exc
        rootfs.prepare_staging(settings, state_dir)  # before the capabilities advertise it
        return driver

    def _bind(self, stack: contextlib.AsyncExitStack, server: Any) -> tuple[PeerGate, Any]:
        """The public socket is podmand's peer gate; the servers listen on private sockets
        behind it (``server`` for allowed peers, the deny server for the others)."""
        stack.callback(self._remove_unless_ready, prepare_socket(self.socket_path))
        internal = private_dir(self.socket_path)
        stack.callback(remove_private_dir, internal)
        allowed_path, denied_path = str(internal / "grpc.sock"), str(internal / "deny.sock")
        with private_umask():
            server.add_insecure_port(f"unix://{allowed_path}")
            deny = deny_server(denied_path)
        if self.settings.listen_tcp:  # loopback development only: no peer check over TCP
            server.add_insecure_port(self.settings.listen_tcp)
        log.debug("driver socket %s is spliced to %s (refused peers: %s)", self.socket_path, allowed_path, denied_path)
        gate = PeerGate(self.socket_path, allowed_path, denied_path, own_uid=os.geteuid(),
                        allowed_uids=self.settings.allowed_peer_uids, unmapped=unmapped_uid())
        return gate, deny

    def _run_hub(self, stack: contextlib.AsyncExitStack, hub: Hub, driver: Driver) -> None:
        """Start the hub (it opens Podman's event stream). On the way out the hub stops
        first (it would start new work), then the driver's background work."""
        stack.push_async_callback(self._close_driver, driver)
        hub_task = asyncio.create_task(hub.run())
        hub_task.add_done_callback(self._hub_ended)
        stack.push_async_callback(cancel_and_wait, hub_task)

    async def _connected(self, hub: Hub) -> None:
        try:
            await asyncio.wait_for(hub.connected.wait(), CONNECT_TIMEOUT)
        except TimeoutError:
            last = f" (last: {hub.failure})" if hub.failure else ""
            raise StartupError(f"Podman's event stream did not connect within {CONNECT_TIMEOUT:.0f} s{last}") from None

    def _hub_ended(self, task: asyncio.Task[None]) -> None:
        """Without the hub no watch stream can work: a crashed hub stops the server."""
        crash = None if task.cancelled() else task.exception()
        if crash is not None:
            self.stop.fail("the watch hub crashed; shutting down", crash)

    def _remove_unless_ready(self, created: list[Path]) -> None:
        """The socket's directory stays after serving: a gateway may bind-mount it, and
        removing it would leave that mount pointing at a deleted directory across a restart."""
        if not self.ready:
            remove_dirs(created)

    async def _close_front(self, server: Any, deny: Any, gate: PeerGate) -> None:
        """Stop accepting, let in-flight RPCs finish (a forced stop cancels them), cut the rest."""
        gate.stop_accepting()
        stopping = asyncio.ensure_future(server.stop(GRACE))
        if not await self.stop.unless_forced(asyncio.shield(stopping)):
            await server.stop(None)  # cancels every RPC still running
        await stopping
        await deny.stop(None)
        gate.close()

    async def _close_driver(self, driver: Driver) -> None:
        """Bounded: a cancelled task's clean-up may wait on a slow Podman, and durable
        intent plus garbage collection finish what is cut short."""
        if not await self.stop.unless_forced(driver.close(), SHUTDOWN_DEADLINE) and not self.stop.forced.is_set():
            log.warning("background work did not end within %ss; leaving it to the next start", SHUTDOWN_DEADLINE)


async def warn_unreached(settings: Settings) -> None:
    """serve's one warning when sandboxes may not reach the gateway (netfacts.startup_warning),
    checked once serving: it reads this host's listeners and may resolve the endpoint's name,
    which nothing served waits for. Its end is logged at debug level either way."""
    try:
        unreached = await in_daemon_thread(functools.partial(netfacts.startup_warning, settings))
    except Exception as exc:  # a bug in the check must not end serving: one line, no traceback
        log.warning("gateway reach check failed: %s: %s", type(exc).__name__, exc)
        return
    if unreached:
        log.warning("%s", unreached)
    else:
        log.debug("gateway reach checked: sandboxes reach it")


async def in_daemon_thread(call: Callable[[], T]) -> T:
    """``call()``'s result, computed in a thread of its own that does not hold up the
    process's exit: a name lookup may hang for as long as the resolver likes, and the
    threads of ``asyncio.to_thread`` are waited for when the loop shuts down. Cancelling
    the wait abandons the thread (its result is dropped)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, exc: BaseException | None) -> None:
        if done.cancelled():
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, exc = call(), None
        except BaseException as failure:  # handed to the waiter, as to_thread would
            result, exc = None, failure
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=run, name="podmand-reach-check", daemon=True).start()
    return await done


async def end_serving(health_servicer: Any, hub: Hub) -> None:
    """NOT_SERVING from now on, whatever Podman does; watch streams end UNAVAILABLE."""
    await health_servicer.enter_graceful_shutdown()
    hub.close()


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and let it end; how it ended was reported by its done callback."""
    task.cancel()
    await asyncio.wait((task,))


def abandoning(readiness: Readiness) -> Callable[..., None]:
    """An exit callback: RPCs waiting for a start-up that did not finish answer UNAVAILABLE
    at once (before the in-flight grace), saying why."""

    def release(_kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        if isinstance(exc, StartupError):
            readiness.abandon(f"podmand failed to start: {exc}")
        else:
            readiness.abandon("podmand is shutting down")

    return release
