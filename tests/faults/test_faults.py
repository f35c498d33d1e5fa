"""``podmand serve`` as a real process against a libpod that fails on cue.

The fake serves from its own thread and loop; podmand is a subprocess driven
by the synchronous gRPC client, as the gateway would drive it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand.host import discovery
from tests import wait
from tests.fakes.libpod import FakeLibpod, Feed, Request, Stream
from tests.jwt import make_launch

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 15.0
VOLUMES = "/v4.0.0/libpod/volumes"


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    return wait.wait_until(predicate, timeout, what)


class Podmand:
    """One ``python -m podmand serve`` process; stderr (its log) is collected."""

    def __init__(self, tmp: Path, podman_socket: str | None, **env: str) -> None:
        self.socket = str(tmp / "d.sock")
        self.state = tmp / "state"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSHELL_", "PODMAND_"))}
        base.update({
            "OPENSHELL_COMPUTE_DRIVER_SOCKET": self.socket,
            "PODMAND_STATE_DIR": str(self.state),
            "OPENSHELL_SANDBOX_IMAGE": "img:1",
            "OPENSHELL_SUPERVISOR_IMAGE": "sup:1",
            "PYTHONUNBUFFERED": "1",
        })
        if podman_socket is not None:
            base["OPENSHELL_PODMAN_SOCKET"] = podman_socket
        base.update(env)
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "podmand", "serve"], cwd=ROOT, env=base,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._channel: grpc.Channel | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_ready(self) -> Podmand:
        wait_until(lambda: "ready: serving" in self.log or self.proc.poll() is not None, "podmand to serve")
        assert self.proc.poll() is None, f"podmand exited {self.proc.returncode}:\n{self.log}"
        return self

    def wait_exit(self, timeout: float = DEADLINE) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    @property
    def stub(self) -> pb_grpc.ComputeDriverStub:
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket}")
        return pb_grpc.ComputeDriverStub(self._channel)

    def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait_exit()


@pytest.fixture
def launch(tmp: Path, fake: FakeLibpod) -> Iterator[Callable[..., Podmand]]:
    started: list[Podmand] = []

    def launch(podman_socket: str | None = fake.path, **env: str) -> Podmand:
        proc = Podmand(tmp, podman_socket, **env)
        started.append(proc)
        return proc

    try:
        yield launch
    finally:
        fake.release_pulls()
        for proc in started:
            proc.stop()


def sandbox(sandbox_id: str = "sb1") -> pb.DriverSandbox:
    return pb.DriverSandbox(id=sandbox_id, name="box", workspace="ws", spec=pb.DriverSandboxSpec(
        command=["sleep", "600"], launch_authentication=make_launch(sandbox_id, "g0000000000000001")))


def ready(snapshot: pb.DriverSandbox) -> pb.DriverCondition:
    (cond,) = [c for c in snapshot.status.conditions if c.type == "Ready"]
    return cond


def rpc_error(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


def next_sandbox(watch: Iterator[pb.WatchSandboxesEvent], sandbox_id: str) -> pb.DriverSandbox:
    for event in watch:
        if event.WhichOneof("payload") == "sandbox" and event.sandbox.sandbox.id == sandbox_id:
            return event.sandbox.sandbox
    raise AssertionError("watch stream ended")


# ---------------------------------------------------------------- a. 500 mid-create


def test_container_create_500_fails_the_sandbox_and_delete_cleans_up(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Create is asynchronous, so a libpod 500 surfaces as Ready=False on the watch;
    Delete must still remove the durable intent (the volume) and the secrets dir."""
    def create(req: Request) -> tuple[int, dict[str, str], Any]:
        if req.json()["name"].startswith("podmand-read-"):
            return 201, {}, {"Id": "extract", "Warnings": []}
        return 500, {}, {"cause": "x", "message": "boom", "response": 500}

    fake.route("POST", "/containers/create", create)
    d = launch().wait_ready()
    watch = d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE)
    try:
        d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
        while True:
            cond = ready(next_sandbox(watch, "sb1"))
            if cond.reason != "Starting" and cond.reason != "ContainerStarting":
                break
    finally:
        watch.cancel()
    assert (cond.status, cond.reason) == ("False", "ContainerCreateFailed")
    assert "boom" in cond.message
    # Two image readers (account files, supervisor binary), then the sandbox container create
    # failed twice: the second try without the network and image IDs podmand remembered.
    assert fake.count(r"GET .*/containers/podmand-read-[^/]+/archive\?path=/openshell-sandbox") == 1
    assert fake.count(r"GET .*/containers/podmand-read-[^/]+/archive\?path=/etc/passwd") == 1
    assert len(fake.created()) == 4
    sandbox_dir = d.state / "sandboxes" / "sb1"
    assert sandbox_dir.is_dir()
    get = d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sb1"), timeout=5)
    assert ready(get.sandbox).reason == "ContainerCreateFailed"

    resp = d.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id="sb1"), timeout=5)
    assert resp.deleted
    assert fake.count(f"DELETE {VOLUMES}/openshell-sandbox-sb1-workspace") == 1
    assert not sandbox_dir.exists()
    err = rpc_error(lambda: d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sb1"), timeout=5))
    assert err.code() == grpc.StatusCode.NOT_FOUND


def test_volume_create_500_fails_create_and_leaves_nothing(fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """If recording the intent fails, CreateSandbox fails synchronously and the
    secrets directory it wrote first is removed again."""
    fake.route("POST", "/volumes/create", (500, {}, {"message": "volume boom"}))
    d = launch().wait_ready()
    err = rpc_error(lambda: d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb2")), timeout=5))
    assert err.code() == grpc.StatusCode.INTERNAL
    assert "volume boom" in (err.details() or "")
    assert not (d.state / "sandboxes" / "sb2").exists()
    err = rpc_error(lambda: d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sb2"), timeout=5))
    assert err.code() == grpc.StatusCode.NOT_FOUND


# ---------------------------------------------------------------- b. slow pull


def test_create_returns_while_the_pull_is_blocked(fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """The gateway's CreateSandbox deadline must not depend on image size."""
    fake.block_pulls()
    d = launch().wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    fake.wait_for(lambda: fake.count(r"POST .*/images/pull") == 1, what="the pull to start")
    got = d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sb1"), timeout=5).sandbox
    cond = ready(got)
    assert (cond.status, cond.reason) == ("False", "Starting")
    assert got.id == "sb1" and got.workspace == "ws"
    listed = d.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=5).sandboxes
    assert [s.id for s in listed] == ["sb1"]
    # Only the image reader that resolved the workload identity; no sandbox container.
    assert len(fake.created()) == fake.count(r"GET .*/containers/podmand-read-.*/etc/passwd")


@pytest.mark.parametrize("how", [
    "drop",
    "cut",
])
def test_pull_connection_lost_is_retried(how: str, fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """A broken pull connection is Podman being unavailable: provisioning reports
    DependenciesNotReady and pulls again instead of failing or stalling forever."""
    pulls = Feed(fake)
    fake.route("POST", "/images/pull", lambda _req: Stream(pulls))
    d = launch().wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    fake.wait_for(lambda: pulls.opened == 1, what="the first pull")
    getattr(pulls, how)()
    fake.wait_for(lambda: pulls.opened == 2, timeout=5, what="the retried pull")
    cond = ready(d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sb1"), timeout=5).sandbox)
    assert (cond.status, cond.reason) == ("False", "DependenciesNotReady")
    assert "Podman is unavailable" in cond.message
    # Another failed retry is the same condition: its transition_time stays put.
    getattr(pulls, how)()
    fake.wait_for(lambda: pulls.opened == 3, timeout=10, what="the second retry")
    again = ready(d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sb1"), timeout=5).sandbox)
    assert again.reason == "DependenciesNotReady"
    assert again.transition_time == cond.transition_time


# ---------------------------------------------------------------- c. dropped event stream


@pytest.mark.parametrize("how", [
    "end",
    "drop",
    "cut",
])
def test_lost_event_stream_ends_watches_and_hub_resubscribes(
        how: str, fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Without Podman events a watch would silently go stale: it must end
    UNAVAILABLE (the gateway re-watches) and the next watch must work."""
    fake.block_pulls()  # keeps sb1 pending, so every watch opens with its snapshot
    d = launch().wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    assert fake.count(r"GET .*/events\?.*container") == 1

    first = d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=5)
    assert next_sandbox(first, "sb1").id == "sb1"  # subscribed
    getattr(fake.events, how)()
    err = rpc_error(lambda: next(first))
    assert err.code() == grpc.StatusCode.UNAVAILABLE, err
    assert "event stream lost" in (err.details() or "")

    second = d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE)
    try:
        assert ready(next_sandbox(second, "sb1")).reason == "Starting"
    finally:
        second.cancel()
    assert fake.count(r"GET .*/events\?.*container") == 2


# ---------------------------------------------------------------- d. Podman gone


@pytest.mark.parametrize("leftover", ["no socket", "dead socket"])
def test_podman_gone_is_unavailable(leftover: str, fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """A stopped Podman is a retryable condition for the gateway, not INTERNAL."""
    d = launch().wait_ready()
    d.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=5)  # a pooled connection now exists
    fake.stop_thread()
    dead = None
    if leftover == "dead socket":
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(fake.path)  # the file stays, nobody listens: ECONNREFUSED
    try:
        err = rpc_error(lambda: d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sb1"), timeout=10))
        assert err.code() == grpc.StatusCode.UNAVAILABLE, err
        assert "Podman is unavailable" in (err.details() or "")
        err = rpc_error(lambda: d.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=10))
        assert err.code() == grpc.StatusCode.UNAVAILABLE, err
        err = rpc_error(lambda: d.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id="sb1"), timeout=10))
        assert err.code() == grpc.StatusCode.UNAVAILABLE, err
        assert d.proc.poll() is None  # and podmand keeps running
    finally:
        if dead is not None:
            dead.close()


# ---------------------------------------------------------------- e. pull policy never


def test_missing_image_with_pull_policy_never(fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """With 'never' a missing image is the caller's problem, reported before anything is allocated."""
    fake.route("GET", "/images/img:1/json", (404, {}, {"message": "img:1: image not known"}))
    d = launch(OPENSHELL_SANDBOX_IMAGE_PULL_POLICY="never").wait_ready()
    err = rpc_error(lambda: d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'img:1'" in (err.details() or "") and "never" in (err.details() or "")
    assert fake.count(r"GET .*/images/img:1/json") == 1
    assert fake.count(r"POST .*/volumes/create") == 0
    assert fake.count(r"POST .*/images/pull") == 0
    assert not (d.state / "sandboxes" / "sb1").exists()


# ---------------------------------------------------------------- f. driver socket


def test_stale_socket_of_ours_is_replaced(fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """After a crash (SIGKILL) the socket file stays; the next start must not refuse it."""
    first = launch().wait_ready()
    first.proc.send_signal(signal.SIGKILL)
    assert first.wait_exit() == -signal.SIGKILL
    assert Path(first.socket).exists()

    second = launch().wait_ready()
    assert list(second.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=5).sandboxes) == []
    assert os.stat(second.socket).st_mode & 0o777 == 0o600


def test_live_socket_is_not_stolen(tmp: Path, fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """A second podmand on the same path must not unlink a live server's socket."""
    first = launch().wait_ready()
    second = launch(PODMAND_STATE_DIR=str(tmp / "state-2"))  # its own state dir: not refused by the lock
    assert second.wait_exit() == 1
    assert "another process is already serving" in second.log
    first.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=5)


def test_regular_file_at_socket_path_is_refused(tmp: Path, fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """podmand never deletes something it did not create."""
    (tmp / "d.sock").write_text("precious")
    d = launch()
    assert d.wait_exit() == 1
    assert "not an owned Unix socket" in d.log
    assert (tmp / "d.sock").read_text() == "precious"


# ---------------------------------------------------------------- g. SIGTERM


def test_sigterm_ends_watches_and_exits_cleanly(fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """On SIGTERM open watch streams end UNAVAILABLE (so the gateway re-watches a
    successor), the process exits 0 and removes its socket."""
    fake.block_pulls()
    d = launch().wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    watch = d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE)
    assert next_sandbox(watch, "sb1").id == "sb1"  # subscribed
    started = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    err = rpc_error(lambda: next(watch))
    assert err.code() == grpc.StatusCode.UNAVAILABLE, err
    assert d.wait_exit(timeout=DEADLINE) == 0, d.log
    assert time.monotonic() - started < 8.0  # not the 10 s grace: nothing was left hanging
    assert not Path(d.socket).exists()
    assert "stopped" in d.log


# ---------------------------------------------------------------- h. no Podman


def test_explicit_missing_podman_socket(launch: Callable[..., Podmand]) -> None:
    """The operator is told which path was tried and why it failed."""
    d = launch("/nonexistent/podman.sock")
    assert d.wait_exit() == 1
    assert "/nonexistent/podman.sock" in d.log
    assert "does not exist" in d.log
    assert "Traceback" not in d.log


@pytest.mark.parametrize("uid", [0, 4242])
def test_candidates_cover_every_known_location(tmp: Path, uid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an explicit socket every candidate is listed, rootful last; a user also
    gets Podman's own fallback runtime directory (no logind)."""
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    env = {"XDG_RUNTIME_DIR": str(tmp / "xdg"), "HOME": str(tmp / "home"), "TMPDIR": str(tmp / "t")}
    fallback = [str(tmp / "t" / f"podman-run-{uid}" / "podman" / "podman.sock")] if uid else []
    assert discovery.candidates("", env) == [
        str(tmp / "xdg" / "podman" / "podman.sock"),
        f"/run/user/{uid}/podman/podman.sock",
        *fallback,
        str(tmp / "home" / ".local" / "share" / "containers" / "podman" / "machine" / "podman.sock"),
        "/run/podman/podman.sock",
    ]
    assert discovery.candidates("unix:///x/p.sock", env) == ["/x/p.sock"]


def test_no_podman_socket_message_lists_each_attempt() -> None:
    """The error names every path with its own problem, and how to start Podman."""
    refused = "connection refused (is the Podman service running?)"
    exc = discovery.NoPodmanSocket([discovery.Attempt("/a.sock", "does not exist"),
                                    discovery.Attempt("/b.sock", refused)])
    text = str(exc)
    assert "  /a.sock: does not exist" in text
    assert "  /b.sock: connection refused" in text
    assert "OPENSHELL_PODMAN_SOCKET" in text


def test_probe_explains_each_kind_of_bad_socket(tmp: Path) -> None:
    """Each way a candidate can be wrong gets its own explanation."""
    regular = tmp / "file.sock"
    regular.write_text("")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(tmp / "dead.sock"))
    docker = FakeLibpod()
    docker.common_headers = {"Api-Version": "1.41"}  # answers /_ping, but not libpod
    libpod = FakeLibpod()

    async def main() -> list[str]:
        await docker.start(str(tmp / "docker.sock"))
        await libpod.start(str(tmp / "libpod.sock"))
        try:
            return [await discovery.probe(str(tmp / name))
                    for name in ("none.sock", "file.sock", "dead.sock", "docker.sock", "libpod.sock")]
        finally:
            await docker.close()
            await libpod.close()

    try:
        problems = asyncio.run(asyncio.wait_for(main(), DEADLINE))
    finally:
        dead.close()
    assert problems[0] == "does not exist"
    assert problems[1] == "exists but is not a socket"
    assert problems[2].startswith("connection refused")
    assert "not a libpod API" in problems[3]
    assert problems[4] == ""


def _owned(path: Path, uid: int, mode: int | None = None) -> None:
    os.chown(path, uid, uid, follow_symlinks=False)
    if mode is not None:
        path.chmod(mode)


def test_planted_fallback_socket_is_never_contacted(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another local user can pre-create ${TMPDIR:-/tmp}/podman-run-<uid> with a fake libpod in it: podmand
    must not talk to it (it would send registry credentials), and says why; a safe one of ours answers."""
    uid = 4242
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("HOME", str(tmp / "home"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    fallback = tmp / f"podman-run-{uid}"
    sock = fallback / "podman" / "podman.sock"
    assert str(sock) in discovery.candidates("")
    (fallback / "podman").mkdir(parents=True)
    planted = FakeLibpod().start_in_thread(str(sock))

    def probe() -> str:
        return asyncio.run(asyncio.wait_for(discovery.probe(str(sock)), DEADLINE))

    try:
        _owned(fallback, 4243, 0o700)  # another user's directory
        assert "is owned by uid 4243, not 4242" in probe()
        _owned(fallback, uid, 0o777)  # ours, but others may have put things in it
        assert "writable by group or others" in probe()
        _owned(fallback, uid, 0o700)
        _owned(fallback / "podman", uid)
        _owned(sock, 4243)  # a safe directory, but not our socket
        assert "owned by uid 4243" in probe()
        elsewhere = tmp / "elsewhere"
        fallback.rename(elsewhere)
        fallback.symlink_to(elsewhere)  # a symlink, even to a directory of ours
        assert "is a symlink" in probe()
        assert planted.requests == []  # never contacted
        fallback.unlink()
        elsewhere.rename(fallback)
        _owned(sock, uid)
        assert probe() == ""
        assert planted.requests
    finally:
        planted.stop_thread()


def test_well_known_sockets_must_be_their_owners(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's own locations must hold the user's (or root's) socket; the rootful one root's; a path
    the operator names elsewhere is taken as it is."""
    uid = 4242
    env = {"XDG_RUNTIME_DIR": str(tmp / "xdg"), "HOME": str(tmp / "home"), "TMPDIR": str(tmp)}
    xdg = str(tmp / "xdg" / "podman" / "podman.sock")
    machine = str(tmp / "home" / ".local" / "share" / "containers" / "podman" / "machine" / "podman.sock")
    for path in (xdg, f"/run/user/{uid}/podman/podman.sock", machine):
        assert discovery.socket_owners(path, env, uid) == {uid, 0}
    assert discovery.socket_owners("/run/podman/podman.sock", env, uid) == {0}
    assert discovery.socket_owners("/run/podman/podman.sock", env, 0) == {0}
    assert discovery.socket_owners(str(tmp / "named.sock"), env, uid) is None
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    monkeypatch.setenv("XDG_RUNTIME_DIR", env["XDG_RUNTIME_DIR"])
    Path(xdg).parent.mkdir(parents=True)
    fake = FakeLibpod().start_in_thread(xdg)
    try:
        _owned(Path(xdg), 4243)
        problem = asyncio.run(asyncio.wait_for(discovery.probe(xdg), DEADLINE))
        assert "owned by uid 4243" in problem and fake.requests == []
        _owned(Path(xdg), uid)
        assert asyncio.run(asyncio.wait_for(discovery.probe(xdg), DEADLINE)) == ""
    finally:
        fake.stop_thread()
