"""``podmand serve`` in-process against the fake libpod: start-up, signals, shutdown,
and the start-up error boundary as ``__main__`` prints it.

The server runs on this (the main) thread's loop, where signal handlers can live;
the fake libpod serves from its own thread; the client is grpc.aio on the same loop.
"""

from __future__ import annotations

import asyncio
import fcntl
import importlib
import json
import os
import pkgutil
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import podmand
from podmand import __main__ as cli
from podmand import server
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand._proto import extension_pb2 as ext
from podmand.config import Settings, rundir
from podmand.errors import ConfigError, StartupError
from podmand.host import discovery, enforcement, podmanservice, socketpath, statedir
from podmand.host.shutdown import Stop
from podmand.server import Server
from podmand.watch.hub import Hub
from tests import wait
from tests.fakes import infos
from tests.fakes.libpod import INFO, FakeLibpod, Hang, Reply, Request

DEADLINE = 15.0
REPO_ROOT = Path(__file__).resolve().parents[2]


def settings_for(tmp: Path, fake: FakeLibpod) -> Settings:
    """The driver socket in a directory podmand has to create (a failed start removes it)."""
    return Settings(socket=str(tmp / "run" / "d.sock"), podman_socket=fake.path, state_dir=str(tmp / "state"),
                    sandbox_image="img:1", supervisor_image="sup:1", resync_interval=3600.0)


async def until(predicate: Callable[[], Any], what: str) -> None:
    """tests/wait.py's deadline-bound poll, off the loop (the server runs on it)."""
    await asyncio.to_thread(wait.wait_until, predicate, DEADLINE, what)


def hanging(hang: threading.Event, entered: threading.Event) -> Callable[[Request], Any]:
    """Podman's container list: empty, until ``hang`` is set; then it never answers."""

    def containers(_req: Request) -> Any:
        if not hang.is_set():
            return 200, {}, []
        entered.set()
        return Hang()

    return containers


def lock_is_free(state: Path) -> bool:
    fd = os.open(state / statedir.LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def run_server(srv: Server, scenario: Callable[[asyncio.Task[int]], Awaitable[None]]) -> int:
    """Run ``srv`` and ``scenario`` (given the server's task) on one loop; the exit status.
    A failing scenario forces the server down before its error is raised."""

    async def main() -> int:
        running = asyncio.ensure_future(srv.run())
        try:
            await scenario(running)
        except BaseException:
            if not running.done():
                srv.stop.on_signal(signal.SIGTERM)
                srv.stop.on_signal(signal.SIGTERM)
                await asyncio.wait((running,), timeout=DEADLINE)
            raise
        return await asyncio.wait_for(running, DEADLINE)

    return asyncio.run(main())


@pytest.fixture
def own_handlers() -> Iterator[dict[signal.Signals, Callable[[int, Any], None]]]:
    """Handlers of the test's own on SIGTERM, SIGINT and SIGUSR1, put back afterwards."""

    def mine(_sig: int, _frame: Any) -> None:
        raise AssertionError("the test's own handler ran")

    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    before = {sig: signal.signal(sig, mine) for sig in signals}
    try:
        yield {sig: mine for sig in signals}
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_one_signal_stops_gracefully_and_restores_the_handlers(
        sig: signal.Signals, tmp: Path, fake: FakeLibpod, own_handlers: dict[signal.Signals, Any],
        caplog: pytest.LogCaptureFixture) -> None:
    """One SIGTERM or SIGINT: exit status 0, socket and private sockets gone (the socket's
    directory stays), lock released, and the handlers found before are back."""
    srv = Server(settings_for(tmp, fake))

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(lambda: srv.ready or running.done(), "podmand to serve")
        assert signal.getsignal(signal.SIGTERM) is not own_handlers[signal.SIGTERM]  # captured while serving
        os.kill(os.getpid(), signal.SIGUSR1)  # a task dump, not the test's handler
        await until(lambda: "task " in caplog.text, "the task dump")
        os.kill(os.getpid(), sig)

    with caplog.at_level("INFO", "podmand"):
        assert run_server(srv, scenario) == 0
    for sig, handler in own_handlers.items():
        assert signal.getsignal(sig) is handler, sig
    assert "shutting down: finishing in-flight RPCs" in caplog.text and "stopped" in caplog.text
    assert "second signal" not in caplog.text
    assert os.listdir(tmp / "run") == []  # no socket, no private directory; the directory itself stays
    assert lock_is_free(tmp / "state")


def test_second_sigterm_cuts_a_slow_graceful_shutdown_short(
        tmp: Path, fake: FakeLibpod, own_handlers: dict[signal.Signals, Any], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An RPC that never finishes holds the graceful stop for its grace (an hour here); the
    second SIGTERM cancels it: exit status 1, sockets and lock still cleaned up."""
    monkeypatch.setattr(server, "GRACE", 3600.0)
    monkeypatch.setattr(server, "SHUTDOWN_DEADLINE", 3600.0)
    hang, entered = threading.Event(), threading.Event()
    fake.route("GET", "/containers/json", hanging(hang, entered))
    srv = Server(settings_for(tmp, fake))
    public = str(tmp / "run" / "d.sock")

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(lambda: srv.ready or running.done(), "podmand to serve")
        hang.set()
        async with grpc.aio.insecure_channel(f"unix://{public}") as channel:
            listing = asyncio.ensure_future(pb_grpc.ComputeDriverStub(channel).ListSandboxes(pb.ListSandboxesRequest()))
            await until(entered.is_set, "the RPC to reach Podman")
            os.kill(os.getpid(), signal.SIGTERM)
            await until(lambda: not os.path.exists(public), "podmand to stop accepting")
            assert not listing.done() and not running.done()  # held by the grace
            os.kill(os.getpid(), signal.SIGTERM)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await asyncio.wait_for(listing, DEADLINE)
            assert err.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)

    with caplog.at_level("INFO", "podmand"):
        assert run_server(srv, scenario) == 1
    assert "second signal (SIGTERM): exiting without finishing" in caplog.text
    assert "did not end within" not in caplog.text
    for sig, handler in own_handlers.items():
        assert signal.getsignal(sig) is handler, sig
    assert os.listdir(tmp / "run") == []
    assert lock_is_free(tmp / "state")


def test_signal_during_start_up_abandons_it(tmp: Path, fake: FakeLibpod, own_handlers: dict[signal.Signals, Any],
                                           caplog: pytest.LogCaptureFixture) -> None:
    """Waiting for Podman's event stream (it never answers): SIGTERM ends the start-up with
    exit status 0, leaving nothing behind, not even the socket directory it created."""
    fake.route("GET", "/events", lambda _req: Hang())
    srv = Server(settings_for(tmp, fake))

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(lambda: fake.count(r"GET .*/events") or running.done(), "the event subscription")
        await until(lambda: (tmp / "run").exists(), "the socket directory")
        os.kill(os.getpid(), signal.SIGTERM)

    with caplog.at_level("INFO", "podmand"):
        assert run_server(srv, scenario) == 0
    assert not srv.ready and "ready: serving" not in caplog.text
    assert not (tmp / "run").exists()
    assert lock_is_free(tmp / "state")
    assert signal.getsignal(signal.SIGTERM) is own_handlers[signal.SIGTERM]


def test_a_crashed_hub_stops_the_server_with_status_1(tmp: Path, fake: FakeLibpod, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Without the hub no watch stream works: it crashing (here once serving) is a stop
    that exits 1, so a supervisor that restarts on failure restarts podmand."""
    crash = threading.Event()
    real_run = Hub.run

    async def run(hub: Hub) -> None:
        serving = asyncio.ensure_future(real_run(hub))
        await asyncio.to_thread(crash.wait)
        serving.cancel()
        raise RuntimeError("hub bug")

    monkeypatch.setattr(Hub, "run", run)
    srv = Server(settings_for(tmp, fake))

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(lambda: srv.ready or running.done(), "podmand to serve")
        crash.set()

    with caplog.at_level("INFO", "podmand"):
        assert run_server(srv, scenario) == 1
    [record] = [r for r in caplog.records if r.getMessage() == "the watch hub crashed; shutting down"]
    assert record.levelname == "CRITICAL"
    assert "stopped" in caplog.text
    assert os.listdir(tmp / "run") == []
    assert lock_is_free(tmp / "state")


def test_cli_second_sigterm_exits_1_and_cleans_up(tmp: Path, fake: FakeLibpod) -> None:
    """``podmand serve`` as a process: the forced stop still removes the sockets and
    releases the lock, then exits 1 without waiting for the abandoned work."""
    hang, entered = threading.Event(), threading.Event()
    fake.route("GET", "/containers/json", hanging(hang, entered))
    s = settings_for(tmp, fake)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSHELL_", "PODMAND_"))}
    env.update(OPENSHELL_COMPUTE_DRIVER_SOCKET=s.socket, OPENSHELL_PODMAN_SOCKET=fake.path,
               PODMAND_STATE_DIR=s.state_dir, OPENSHELL_SANDBOX_IMAGE="img:1", OPENSHELL_SUPERVISOR_IMAGE="sup:1")
    log = tmp / "podmand.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "podmand", "serve"], cwd=REPO_ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    channel = grpc.insecure_channel(f"unix://{s.socket}")
    try:
        wait.wait_until(lambda: "ready: serving" in log.read_text() or proc.poll() is not None, DEADLINE, "ready")
        hang.set()
        listing = pb_grpc.ComputeDriverStub(channel).ListSandboxes.future(pb.ListSandboxesRequest())
        wait.wait_until(entered.is_set, DEADLINE, "the RPC to reach Podman")
        proc.send_signal(signal.SIGTERM)
        wait.wait_until(lambda: not os.path.exists(s.socket), DEADLINE, "podmand to stop accepting")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(DEADLINE) == 1, log.read_text()
        assert listing.exception(DEADLINE) is not None
    finally:
        channel.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "second signal (SIGTERM): exiting without finishing" in text and "Traceback" not in text
    assert os.listdir(tmp / "run") == []
    assert lock_is_free(tmp / "state")


def start_up_failure(tmp: Path, fake: FakeLibpod) -> StartupError:
    srv = Server(settings_for(tmp, fake))

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(running.done, "the start-up to fail")

    with pytest.raises(StartupError) as err:
        run_server(srv, scenario)
    assert not (tmp / "run").exists()
    assert lock_is_free(tmp / "state")
    return err.value


def test_podman_error_at_start_is_a_start_up_error(tmp: Path, fake: FakeLibpod) -> None:
    fake.route("GET", "/volumes/json", (500, {}, {"message": "volume store broken"}))
    err = start_up_failure(tmp, fake)
    assert str(err).startswith("Podman failed during start-up: ") and "volume store broken" in str(err)


def test_event_stream_that_never_opens_is_a_start_up_error(tmp: Path, fake: FakeLibpod,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "CONNECT_TIMEOUT", 1.0)
    fake.route("GET", "/events", lambda _req: Hang())
    assert str(start_up_failure(tmp, fake)) == "Podman's event stream did not connect within 1 s"


def test_an_event_stream_podman_refuses_in_band_is_named_in_the_start_up_error(
        tmp: Path, fake: FakeLibpod, monkeypatch: pytest.MonkeyPatch) -> None:
    """events_logger = "none" before Podman 5.1: 200, then Podman's error as the stream's only line."""
    monkeypatch.setattr(server, "CONNECT_TIMEOUT", 1.0)
    said = {"cause": 'cannot read events with the "none" backend', "response": 500,
            "message": 'cannot read events with the "none" backend'}
    fake.route("GET", "/events", (200, {"Transfer-Encoding": "chunked"}, json.dumps(said) + "\n"))
    assert str(start_up_failure(tmp, fake)) == (
        "Podman's event stream did not connect within 1 s "
        '(last: podman API error (500): cannot read events with the "none" backend)'
    )


# ---------------------------------------------------------------- accepting before start-up is done

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
ROOTLESS_V1 = {**INFO, "host": {"cgroupVersion": "v1", "security": {"rootless": True}}}  # limits dropped
CAPABILITIES = pb.GetCapabilitiesRequest(gateway=ext.PeerMetadata(
    protocol_version=ext.ProtocolVersion(major=1, minor=0), implementation_name="openshell/gateway",
    implementation_version="0.1.2", supported_capabilities=["openshell.compute.contract"],
    required_capabilities=["openshell.compute.contract"]))


def held_info(fake: FakeLibpod, reply: Reply) -> threading.Event:
    """Podman's /info answers ``reply`` once the returned event is set."""
    release = threading.Event()

    async def info(_req: Request) -> Reply:
        await asyncio.to_thread(release.wait, DEADLINE)
        return reply

    fake.route("GET", "/info", info)
    return release


async def health(channel: grpc.aio.Channel) -> int:
    answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    return int(answer.status)


def limits(caps: pb.GetCapabilitiesResponse) -> tuple[bool, bool]:
    return caps.resource_capabilities.cpu.limit_supported, caps.resource_capabilities.memory.limit_supported


def test_accepts_before_info_answers_and_serves_once_it_has(tmp: Path, fake: FakeLibpod,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """/info held: the socket accepts, health says NOT_SERVING, GetCapabilities answers (local facts
    decide the limits), ListSandboxes waits; once /info answers: SERVING, and the list is answered."""
    monkeypatch.setattr(enforcement, "predicted", lambda _path: enforcement.BOTH)
    release = held_info(fake, (200, {}, INFO))
    srv = Server(settings_for(tmp, fake))
    public = str(tmp / "run" / "d.sock")

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(lambda: os.path.exists(public) or running.done(), "the socket to accept")
        async with grpc.aio.insecure_channel(f"unix://{public}") as channel:
            stub = pb_grpc.ComputeDriverStub(channel)
            listing = asyncio.ensure_future(stub.ListSandboxes(pb.ListSandboxesRequest()))
            assert await health(channel) == NOT_SERVING
            assert limits(await stub.GetCapabilities(CAPABILITIES)) == (True, True)
            assert not listing.done() and not srv.ready and fake.count(r"GET .*/info") == 1
            release.set()
            assert list((await asyncio.wait_for(listing, DEADLINE)).sandboxes) == []
            assert await health(channel) == SERVING
            assert srv.ready
            srv.stop.on_signal(signal.SIGTERM)

    assert run_server(srv, scenario) == 0


@pytest.mark.parametrize("guess", [None, enforcement.BOTH], ids=["unknown", "wrong"])
def test_capabilities_follow_info_when_local_facts_do_not_decide(guess: enforcement.Limits | None, tmp: Path,
                                                                  fake: FakeLibpod,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Rootless Podman on cgroup v1 drops limits. Unknown before /info: GetCapabilities waits for
    it; a wrong prediction is corrected from /info with a warning."""
    monkeypatch.setattr(enforcement, "predicted", lambda _path: guess)
    release = held_info(fake, (200, {}, ROOTLESS_V1))
    srv = Server(settings_for(tmp, fake))
    public = str(tmp / "run" / "d.sock")

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(lambda: os.path.exists(public) or running.done(), "the socket to accept")
        async with grpc.aio.insecure_channel(f"unix://{public}") as channel:
            stub = pb_grpc.ComputeDriverStub(channel)
            early = asyncio.ensure_future(stub.GetCapabilities(CAPABILITIES))
            assert await health(channel) == NOT_SERVING
            if guess is None:
                assert not early.done()
            else:
                assert limits(await early) == (True, True)
            release.set()
            await until(lambda: srv.ready or running.done(), "podmand to serve")
            if guess is None:
                assert limits(await early) == (False, False)
            assert limits(await stub.GetCapabilities(CAPABILITIES)) == (False, False)
            srv.stop.on_signal(signal.SIGTERM)

    with caplog.at_level("INFO", "podmand"):
        assert run_server(srv, scenario) == 0
    assert ("not as predicted" in caplog.text) == (guess is not None)


@pytest.mark.parametrize(
    ("recorded", "bits"),
    [(infos.ROOTLESS_NO_CPU, (False, True)), (infos.ROOTLESS_CGROUPFS, (False, False)),
     (infos.FEDORA40_ROOTLESS_DELEGATED, (True, True))],
    ids=["v2-without-cpu", "v2-cgroupfs", "v2-delegated"],
)
def test_capabilities_claim_the_limits_of_the_controllers_podman_reports(
        recorded: dict[str, Any], bits: tuple[bool, bool], tmp: Path, fake: FakeLibpod,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rootless on cgroup v2 (nothing predicted: Podman's cgroup is its own), GetCapabilities
    answers from /info's controllers: no cpu delegated, no CPU limit claimed; cgroupfs, none."""
    monkeypatch.setattr(enforcement, "predicted", lambda _path: None)
    fake.route("GET", "/info", (200, {}, recorded))
    srv = Server(settings_for(tmp, fake))
    public = str(tmp / "run" / "d.sock")

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(lambda: srv.ready or running.done(), "podmand to serve")
        async with grpc.aio.insecure_channel(f"unix://{public}") as channel:
            assert limits(await pb_grpc.ComputeDriverStub(channel).GetCapabilities(CAPABILITIES)) == bits
        srv.stop.on_signal(signal.SIGTERM)

    assert run_server(srv, scenario) == 0


def test_waiting_rpcs_get_the_start_up_failure(tmp: Path, fake: FakeLibpod, monkeypatch: pytest.MonkeyPatch) -> None:
    """/info fails after the socket accepted: the RPC waiting for start-up answers UNAVAILABLE
    with the start-up error at once, and the start-up still fails as before (nothing left behind)."""
    monkeypatch.setattr(server, "GRACE", 3600.0)  # the waiting RPC must not hold the exit
    monkeypatch.setattr(enforcement, "predicted", lambda _path: enforcement.BOTH)
    release = held_info(fake, (500, {}, {"message": "info broken"}))
    srv = Server(settings_for(tmp, fake))
    public = str(tmp / "run" / "d.sock")
    answered: list[grpc.aio.AioRpcError] = []

    async def scenario(running: asyncio.Task[int]) -> None:
        await until(lambda: os.path.exists(public) or running.done(), "the socket to accept")
        async with grpc.aio.insecure_channel(f"unix://{public}") as channel:
            stub = pb_grpc.ComputeDriverStub(channel)
            listing = asyncio.ensure_future(stub.ListSandboxes(pb.ListSandboxesRequest()))
            assert await health(channel) == NOT_SERVING
            release.set()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await asyncio.wait_for(listing, DEADLINE)
            answered.append(err.value)
        await until(running.done, "the start-up to fail")

    with pytest.raises(StartupError) as err:
        run_server(srv, scenario)
    assert str(err.value).startswith("Podman failed during start-up: ") and "info broken" in str(err.value)
    [rpc] = answered
    assert rpc.code() == grpc.StatusCode.UNAVAILABLE
    assert rpc.details() == f"podmand failed to start: {err.value}"
    assert not (tmp / "run").exists()
    assert lock_is_free(tmp / "state")


# ---------------------------------------------------------------- __main__


def all_subclasses(cls: type) -> set[type]:
    return {sub for direct in cls.__subclasses__() for sub in (direct, *all_subclasses(direct))}


def import_all_of_podmand() -> None:
    for module in pkgutil.iter_modules(podmand.__path__):
        importlib.import_module(f"podmand.{module.name}")


EXAMPLES: dict[type, StartupError] = {
    ConfigError: ConfigError("invalid setting stop_timeout (--stop-timeout / OPENSHELL_STOP_TIMEOUT): bad"),
    podmanservice.AutostartError: podmanservice.AutostartError("Podman's API service exited with status 125"),
    discovery.NoPodmanSocket: discovery.NoPodmanSocket([discovery.Attempt("/x/podman.sock", "does not exist")]),
    rundir.RuntimeDirError: rundir.RuntimeDirError("cannot create the runtime directory /tmp/x: Permission denied"),
    socketpath.SocketError: socketpath.SocketError("another process is already serving on /x.sock"),
    statedir.StateDirError: statedir.StateDirError("state directory /x is in use by another podmand (PID 1)"),
}


def test_every_start_up_error_has_an_example() -> None:
    """So the next test covers each subclass (a new one must be added to EXAMPLES)."""
    import_all_of_podmand()
    assert all_subclasses(StartupError) == set(EXAMPLES)


@pytest.mark.parametrize("kind", EXAMPLES, ids=lambda kind: kind.__name__)
def test_start_up_errors_are_one_podmand_line(kind: type, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Raised while serving starts: ``podmand: <message>``, nothing else on stderr, exit 1
    (a setting: 2, as a bad flag value)."""
    for name in [n for n in os.environ if n.startswith(("OPENSHELL_", "PODMAND_"))]:
        monkeypatch.delenv(name)
    exc = EXAMPLES[kind]

    def fail(_settings: Settings) -> int:
        raise exc

    monkeypatch.setattr(cli, "serve_main", fail)
    assert cli.main(["serve"]) == (2 if kind is ConfigError else 1)
    assert capsys.readouterr().err == f"podmand: {exc}\n"


def test_a_bug_at_start_is_logged_with_its_traceback(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Not a StartupError: one ``podmand: unexpected error`` line, the traceback in the log."""
    for name in [n for n in os.environ if n.startswith(("OPENSHELL_", "PODMAND_"))]:
        monkeypatch.delenv(name)

    def fail(_settings: Settings) -> int:
        raise KeyError("oops")

    monkeypatch.setattr(cli, "serve_main", fail)
    assert cli.main(["serve"]) == 1
    assert capsys.readouterr().err == "podmand: unexpected error: KeyError: 'oops'\n"
    [record] = [r for r in caplog.records if r.getMessage() == "unexpected error"]
    assert record.levelname == "CRITICAL"
    assert "Traceback (most recent call last)" in caplog.text and "KeyError: 'oops'" in caplog.text


def test_after_a_crash_asks_the_stop_the_first_signal_still_stops_gracefully() -> None:
    """A crash asks for the stop (exit 1) but is not a signal: only a second *signal*
    forces the stop and skips the graceful steps."""

    async def main() -> None:
        stop = Stop()
        stop.fail("the hub crashed", RuntimeError("boom"))
        assert stop.asked.is_set() and stop.status == 1
        stop.on_signal(signal.SIGTERM)
        assert not stop.forced.is_set()
        stop.on_signal(signal.SIGTERM)
        assert stop.forced.is_set()

    asyncio.run(main())


def test_a_reach_check_that_hangs_does_not_hold_up_the_process_exit() -> None:
    """The gateway-reach check may hang in a name lookup: once its wait is cancelled the
    loop ends at once, where asyncio.to_thread's executor would be waited for."""
    started, release = threading.Event(), threading.Event()

    def hang() -> bool:
        started.set()
        return release.wait()

    async def main() -> None:
        waiting = asyncio.ensure_future(server.in_daemon_thread(hang))
        assert await asyncio.to_thread(started.wait, DEADLINE)  # the check is under way, and blocks
        waiting.cancel()
        await asyncio.wait((waiting,))

    loop_thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    try:
        loop_thread.start()
        loop_thread.join(DEADLINE)
        assert not loop_thread.is_alive(), "asyncio.run waited for the hung check"
    finally:
        release.set()


def test_the_reach_checks_thread_hands_back_its_result_and_its_failure() -> None:
    async def main() -> tuple[int, str]:
        value = await server.in_daemon_thread(lambda: 7)
        try:
            await server.in_daemon_thread(lambda: int("x"))
        except ValueError as exc:
            return value, str(exc)
        return value, ""

    assert asyncio.run(main()) == (7, "invalid literal for int() with base 10: 'x'")
