"""End-to-end fixtures: the built pex, run as the rootless Podman user, driven
over its Unix socket with a gRPC client; podman-py is the independent view.

Needs ``tests/setup-podman.sh`` to have run (``tests/run.sh`` does it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand._proto import extension_pb2 as ext
from tests.e2e.usersession import UserSession
from tests.jwt import make_token
from tests.standin.launch import Launch
from tests.wait import SCALE, wait_until

ROOT = Path(__file__).resolve().parents[2]
PEX = Path(os.environ.get("PODMAND_PEX", ROOT / "dist" / "podmand.pex"))
USER = os.environ.get("PODMAND_TEST_USER", "podmand")
SANDBOX_IMAGE = "localhost/podmand-test/sandbox:1"
SUPERVISOR_IMAGE = "localhost/podmand-test/supervisor2:1"
RUNTIME_IMAGE = "localhost/podmand-test/runtime:1"
DEADLINE = 30.0
# What a podmand needs to measure its coverage when tests/run.sh asks for it; `env -i` drops it.
COVERAGE_ENV = {
    k: v for k, v in os.environ.items() if k in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_FILE", "PEX_EXTRA_SYS_PATH")
}


def gateway_metadata() -> ext.PeerMetadata:
    return ext.PeerMetadata(
        protocol_version=ext.ProtocolVersion(major=1, minor=0),
        implementation_name="openshell/gateway",
        implementation_version="0.1.2",
        supported_capabilities=["openshell.compute.contract", "openshell.compute.launch-authentication"],
        required_capabilities=["openshell.compute.contract"],
    )


def sandbox(
    sandbox_id: str | None = None,
    *,
    name: str = "box",
    workspace: str = "ws",
    command: list[str] | None = None,
    token: str | bool = "",
    image: str = SANDBOX_IMAGE,
    **spec: Any,
) -> pb.DriverSandbox:
    sandbox_id = sandbox_id or f"sb-{uuid.uuid4().hex[:12]}"
    spec.setdefault("launch_authentication", Launch(sandbox_id=sandbox_id).bundle())
    return pb.DriverSandbox(
        id=sandbox_id,
        name=name,
        workspace=workspace,
        spec=pb.DriverSandboxSpec(
            command=command if command is not None else ["sleep", "600"],
            sandbox_token=make_token(sandbox_id) if token is True else token or "",
            template=pb.DriverSandboxTemplate(image=image),
            **spec,
        ),
    )


def ready(snapshot: pb.DriverSandbox) -> pb.DriverCondition | None:
    for cond in snapshot.status.conditions:
        if cond.type == "Ready":
            return cond
    return None


class Watch:
    """A WatchSandboxes stream read by a thread; events are kept in order."""

    def __init__(self, stub: pb_grpc.ComputeDriverStub) -> None:
        self.call = stub.WatchSandboxes(pb.WatchSandboxesRequest())
        self.events: list[pb.WatchSandboxesEvent] = []
        self.error: grpc.RpcError | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.call:
                with self._lock:
                    self.events.append(event)
        except grpc.RpcError as exc:
            self.error = exc
        finally:
            self.done.set()

    def snapshots(self, sandbox_id: str) -> list[pb.DriverSandbox]:
        with self._lock:
            return [
                e.sandbox.sandbox
                for e in self.events
                if e.WhichOneof("payload") == "sandbox" and e.sandbox.sandbox.id == sandbox_id
            ]

    def latest(self, sandbox_id: str) -> pb.DriverSandbox | None:
        snaps = self.snapshots(sandbox_id)
        return snaps[-1] if snaps else None

    def wait_reason(self, sandbox_id: str, reason: str, timeout: float = DEADLINE) -> pb.DriverSandbox:
        def check() -> pb.DriverSandbox | None:
            snap = self.latest(sandbox_id)
            cond = ready(snap) if snap else None
            return snap if cond is not None and cond.reason == reason else None

        return wait_until(check, timeout, f"{sandbox_id} Ready reason {reason}",
                          lambda: f"last: {self.latest(sandbox_id)}")

    def deleted(self, sandbox_id: str) -> bool:
        with self._lock:
            return any(e.WhichOneof("payload") == "deleted" and e.deleted.sandbox_id == sandbox_id for e in self.events)

    def platform_events(self, sandbox_id: str) -> list[pb.DriverPlatformEvent]:
        with self._lock:
            return [
                e.platform_event.event
                for e in self.events
                if e.WhichOneof("payload") == "platform_event" and e.platform_event.sandbox_id == sandbox_id
            ]

    def cancel(self) -> None:
        self.call.cancel()


class Podmand:
    """One podmand process (the pex) serving on its own socket and state dir."""

    def __init__(self, pex: Path, podman_socket: str, user: str | None, env: dict[str, str]) -> None:
        self.pex = pex
        self.workdir = Path(tempfile.mkdtemp(prefix="podmand-e2e-"))
        self.socket = str(self.workdir / "run" / "driver.sock")
        self.state_dir = self.workdir / "state"
        self.log_path = self.workdir / "podmand.log"
        self.user = user
        os.chmod(self.workdir, 0o755)
        if user:
            shutil.chown(self.workdir, user, user)
        home = pwd.getpwnam(user).pw_dir if user else os.environ.get("HOME", "/root")
        self.env = {
            "PATH": "/usr/bin:/bin",
            "HOME": home,
            "LANG": "C.UTF-8",
            "OPENSHELL_COMPUTE_DRIVER_SOCKET": self.socket,
            "OPENSHELL_PODMAN_SOCKET": podman_socket,
            "OPENSHELL_SANDBOX_IMAGE": SANDBOX_IMAGE,
            "OPENSHELL_SUPERVISOR_IMAGE": SUPERVISOR_IMAGE,
            "OPENSHELL_STOP_TIMEOUT": "5",
            "OPENSHELL_SANDBOX_RUNTIME_IMAGE": RUNTIME_IMAGE,
            "PODMAND_STATE_DIR": str(self.state_dir),
            "OPENSHELL_LOG_LEVEL": "debug",
            **COVERAGE_ENV,
            **env,
        }
        if user:
            self.env["XDG_RUNTIME_DIR"] = f"/run/user/{pwd.getpwnam(user).pw_uid}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._channel: grpc.Channel | None = None

    def command(self, *args: str) -> list[str]:
        run = [str(self.pex), *args]
        if self.user:
            return ["runuser", "-u", self.user, "--", "env", "-i", *[f"{k}={v}" for k, v in self.env.items()], *run]
        return ["env", "-i", *[f"{k}={v}" for k, v in self.env.items()], *run]

    def start(self, timeout: float = 60.0, args: tuple[str, ...] = ("serve",)) -> Podmand:
        """Run the pex with ``args`` (``()``: no arguments, as upstream's launcher does)."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - the process owns it
        self.proc = subprocess.Popen(self.command(*args), stdout=log, stderr=subprocess.STDOUT)
        wait_until(
            lambda: "ready: serving" in self.logs() or self.proc.poll() is not None,  # type: ignore[union-attr]
            timeout,
            "podmand to log its ready line",
        )
        assert self.proc.poll() is None, f"podmand exited: {self.logs()}"
        return self

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def stub(self) -> pb_grpc.ComputeDriverStub:
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket}")
        return pb_grpc.ComputeDriverStub(self._channel)

    def watch(self) -> Watch:
        return Watch(self.stub)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        # Signal podmand itself: runuser would report its own death, not podmand's exit.
        for pid in self.pids() or [self.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return self.proc.wait(timeout * SCALE)

    def pids(self) -> list[int]:
        """Processes of this podmand (found by the state dir in their environment)."""
        marker = f"PODMAND_STATE_DIR={self.state_dir}".encode()
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != self.proc.pid:  # type: ignore[union-attr]
                try:
                    if marker in (entry / "environ").read_bytes().split(b"\0"):
                        out.append(int(entry.name))
                except OSError:
                    continue
        return out


@pytest.fixture(scope="session")
def podman_socket() -> str:
    sock = os.environ.get("PODMAN_ROOTLESS_SOCK") or f"/run/user/{pwd.getpwnam(USER).pw_uid}/podman/podman.sock"
    if not os.path.exists(sock):
        pytest.fail(
            f"rootless Podman socket {sock} missing: run 'bash tests/setup-podman.sh' first (tests/run.sh does)"
        )
    return sock


@pytest.fixture(scope="session")
def pex_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built pex, copied where the rootless user can run it (the checkout may be private)."""
    if not PEX.exists():
        subprocess.run([str(ROOT / "build_pex.sh")], check=True)
    home = tmp_path_factory.mktemp("pex")
    for d in (home, *home.parents):
        if d == Path("/tmp") or d == Path("/"):
            break
        os.chmod(d, 0o755)
    copy = home / "podmand.pex"
    shutil.copy(PEX, copy)
    os.chmod(copy, 0o755)
    return copy


@pytest.fixture(scope="session")
def podman_client(podman_socket: str) -> Iterator[podman.PodmanClient]:
    with podman.PodmanClient(base_url=f"unix://{podman_socket}") as client:
        # Start from a clean slate: what an aborted earlier run left behind would
        # hold user-namespace ranges and be resumed or reported by new daemons. Only
        # orphans go: a sandbox whose podmand still runs, or whose state directory was
        # used in the last quarter hour (a test restarting its podmand), belongs to another
        # session on this store (a developer's second pytest), which this one must not break.
        owned = {"label": "io.podmand.owner=podmand"}
        live = live_state_dirs()
        volumes = client.volumes.list(filters=owned)
        kept = {v.attrs["Labels"].get("openshell.ai/sandbox-id") for v in volumes
                if v.attrs["Labels"].get("io.podmand.state-dir") in live}
        for item in [*client.containers.list(all=True, filters=owned), *volumes]:
            labels = item.labels if hasattr(item, "labels") else item.attrs["Labels"]
            if labels.get("openshell.ai/sandbox-id") in kept - {None} or labels.get("io.podmand.state-dir") in live:
                continue  # a live podmand's sandbox, or its image reader (labelled with its state dir)
            with contextlib.suppress(podman.errors.NotFound):
                item.remove(force=True)
        yield client


def live_state_dirs(recent: float = 900.0) -> set[str]:
    """State directories of the podmand processes running now (their environment names it),
    and those changed in the last ``recent`` seconds."""
    found = set()
    for state in Path(tempfile.gettempdir()).glob("podmand-e2e-*/state"):
        with contextlib.suppress(OSError):
            if time.time() - max(state.stat().st_mtime, (state / "sandboxes").stat().st_mtime) < recent:
                found.add(str(state))
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            found.update(v[len(b"PODMAND_STATE_DIR="):].decode(errors="replace") for v in environ
                         if v.startswith(b"PODMAND_STATE_DIR="))
    return found


@pytest.fixture
def make_podmand(podman_socket: str, pex_file: Path) -> Iterator[Callable[..., Podmand]]:
    started: list[Podmand] = []

    def make(
        env: dict[str, str] | None = None, *, start: bool = True, user: str | None = USER, socket: str | None = None
    ) -> Podmand:
        daemon = Podmand(pex_file, socket or podman_socket, user, env or {})
        started.append(daemon)
        return daemon.start() if start else daemon

    yield make
    for daemon in started:
        try:
            daemon.stop(signal.SIGTERM, timeout=15.0)  # a clean exit writes its coverage data
        except subprocess.TimeoutExpired:
            daemon.stop(signal.SIGKILL)


@pytest.fixture
def driver(make_podmand: Callable[..., Podmand]) -> Podmand:
    return make_podmand()


@pytest.fixture
def cleanup(podman_client: podman.PodmanClient) -> Iterator[list[str]]:
    """Sandbox ids whose Podman leftovers are force-removed after the test."""
    ids: list[str] = []
    yield ids
    for sandbox_id in ids:
        for item in [*pair_of(podman_client, sandbox_id), *volumes_of(podman_client, sandbox_id)]:
            try:
                item.remove(force=True)
            except podman.errors.APIError as exc:
                if not _gone(exc):
                    raise


def containers_of(client: podman.PodmanClient, sandbox_id: str, role: str = "sandbox") -> list[Any]:
    """The sandbox's containers of one isolation role, fully inspected (list entries lack
    State): its workload (``sandbox``, the default) or its supervisor (``supervisor``)."""
    found = client.containers.list(all=True, filters={"label": f"openshell.ai/sandbox-id={sandbox_id}"})
    return _inspected(client, [c for c in found if c.labels.get("openshell.ai/isolation-role") == role])


def pair_of(client: podman.PodmanClient, sandbox_id: str) -> list[Any]:
    """Every container of the sandbox, workload and supervisor alike."""
    found = client.containers.list(all=True, filters={"label": f"openshell.ai/sandbox-id={sandbox_id}"})
    return _inspected(client, found)


def _gone(exc: podman.errors.APIError) -> bool:
    """Removed between a list and the next call (podmand's own delete racing a test):
    404 on most versions, 500 "no such container/volume" on 4.3.1 and 5.4.2."""
    return isinstance(exc, podman.errors.NotFound) or "no such" in str(exc)


def _inspected(client: podman.PodmanClient, found: list[Any]) -> list[Any]:
    """Each listed container fully inspected, skipping those removed since the list."""
    inspected = []
    for entry in found:
        try:
            inspected.append(client.containers.get(entry.id))
        except podman.errors.APIError as exc:
            if not _gone(exc):
                raise
    return inspected


def volumes_of(client: podman.PodmanClient, sandbox_id: str) -> list[Any]:
    return list(client.volumes.list(filters={"label": f"openshell.ai/sandbox-id={sandbox_id}"}))


def restart_rootless_podman() -> None:
    """Restart the test user's Podman service under whatever podmand has open: on a systemd
    host (the VM lane) the user's socket-activated podman.service, through the user's manager
    (the socket stays and activates it again); elsewhere tests/setup-podman.sh's recorded one."""
    if Path("/run/systemd/system").is_dir():
        UserSession(USER).systemctl("restart", "podman.service", timeout=60 * SCALE)
    else:
        subprocess.run(["bash", str(ROOT / "tests" / "setup-podman.sh"), "restart-rootless"], check=True,
                       capture_output=True, timeout=60 * SCALE, cwd="/")


def podman_version(client: podman.PodmanClient) -> tuple[int, ...]:
    """The server's Podman version, (4, 3, 1) or (5, 4, 2): for a test whose expectation
    depends on it (docs/podman-versions.md lists what differs)."""
    return tuple(int(part) for part in re.findall(r"\d+", client.version()["Version"])[:3])


def run_in(container: Any, cmd: list[str], user: str | None = None) -> tuple[int, str, str]:
    """Exec in a container through podman-py: (exit code, stdout, stderr)."""
    kwargs = {"user": user} if user else {}
    code, (out, err) = container.exec_run(cmd, demux=True, **kwargs)
    return code, (out or b"").decode(), (err or b"").decode()
