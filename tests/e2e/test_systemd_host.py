"""On a host as podmand's users run it: systemd as PID 1, cgroup v2 with the user's controllers
delegated, crun, journald as Podman's event logger, a lingering user whose own systemd manager
socket-activates ``podman.socket``. This machine has none of that, so these tests run in
tests/setup-vm.sh's virtual machine (the VM lane, ``tests/run.sh --host vm``), and are skipped
on a host without systemd; in the VM lane (``PODMAND_VM_LANE``) a host that is not such a one
fails them instead.

What they prove there: limits reach the container's cgroup v2 files and the capabilities say
they are enforced; the units in ``containers/systemd/`` (the pex's user service and the Quadlet
form) start under the user's systemd, reach it with READY=1, restart, and use the socket-
activated Podman without starting one of their own; Podman's own healthcheck timers run the
sidecar's check.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from tests.e2e.conftest import (
    ROOT,
    RUNTIME_IMAGE,
    SANDBOX_IMAGE,
    SUPERVISOR_IMAGE,
    USER,
    Podmand,
    Watch,
    containers_of,
    gateway_metadata,
    pair_of,
    run_in,
    sandbox,
)
from tests.e2e.usersession import UserSession
from tests.standin.launch import Launch
from tests.wait import SCALE, wait_until

SYSTEMD = Path("/run/systemd/system").is_dir()  # sd_booted(): what Podman and systemctl check
IN_LANE = bool(os.environ.get("PODMAND_VM_LANE"))
pytestmark = pytest.mark.skipif(not SYSTEMD and not IN_LANE,
                                reason="needs systemd as PID 1: the VM lane (tests/setup-vm.sh) runs these")
UNITS = ROOT / "containers" / "systemd"
SIDECAR_IMAGE = "localhost/podmand:latest"  # what containers/systemd/podmand.container names


@pytest.fixture(scope="module")
def session() -> UserSession:
    if not SYSTEMD:
        pytest.fail("the VM lane runs on a host without systemd as PID 1")
    return UserSession(USER)


def capabilities(socket: Path) -> pb.GetCapabilitiesResponse:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = pb_grpc.ComputeDriverStub(channel)
        return stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()), timeout=60)


CALL_AS_USER = """
import sys, grpc
from podmand._proto import compute_driver_pb2 as pb, compute_driver_pb2_grpc as pb_grpc
from tests.e2e.conftest import gateway_metadata
with grpc.insecure_channel("unix://" + sys.argv[1]) as channel:
    caps = pb_grpc.ComputeDriverStub(channel).GetCapabilities(
        pb.GetCapabilitiesRequest(gateway=gateway_metadata()), timeout=60)
print(caps.driver_name)
"""


def capabilities_as_user(session: UserSession, socket: Path) -> str:
    """GetCapabilities from the user's own uid: a sidecar in the user's namespace (the Quadlet
    form) sees the host's root as the overflow uid, which it refuses like any stranger."""
    return session.run(sys.executable, "-c", CALL_AS_USER, str(socket), PYTHONPATH=str(ROOT)).stdout.strip()


def cgroup_file(container: Any, name: str) -> str:
    """One of the container's own cgroup v2 files (its cgroup namespace's root)."""
    code, out, err = run_in(container, ["/bin/cat", f"/sys/fs/cgroup/{name}"])
    assert code == 0, f"{name}: {err}"
    return out.strip()


def test_the_host_is_one_users_run(session: UserSession, podman_client: podman.PodmanClient) -> None:
    """The lane's premise, read from the socket-activated Podman podmand talks to: cgroup v2 with
    cpu, memory and pids, the systemd cgroup manager, crun, journald events (no events file)."""
    host = podman_client.info()["host"]
    assert host["cgroupVersion"] == "v2"
    assert host["cgroupManager"] == "systemd"
    assert {"cpu", "memory", "pids"} <= set(host["cgroupControllers"]), host["cgroupControllers"]
    assert host["ociRuntime"]["name"] == "crun"
    assert host["eventLogger"] == "journald"
    assert not (session.runtime / "libpod" / "tmp" / "events" / "events.log").exists()
    socket = session.show("podman.socket", "ActiveState")
    assert socket["ActiveState"] == "active"
    assert "podman.socket" in session.show("podman.service", "TriggeredBy")["TriggeredBy"]


def test_limits_apply_in_the_containers_cgroup(make_podmand: Callable[..., Podmand],
                                              podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """Rootless on cgroup v2 with delegation, the capabilities say limits are enforced, and a
    template's limits and requests are what the kernel applies to both containers of the pair:
    cpu.max, memory.max, memory.low and pids.max read back from inside each."""
    daemon = make_podmand()
    caps = daemon.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    limits = caps.resource_capabilities
    assert (limits.cpu.limit_supported, limits.memory.limit_supported) == (True, True)
    watch = daemon.watch()
    box = sandbox()
    box.spec.template.resources.CopyFrom(pb.DriverResourceRequirements(
        cpu_limit="1500m", cpu_request="250m", memory_limit="512Mi", memory_request="256Mi"))
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", 120)
    for role in ("sandbox", "supervisor"):
        [container] = containers_of(podman_client, box.id, role)
        pids = container.attrs["HostConfig"]["PidsLimit"]
        assert pids > 0, container.attrs["HostConfig"]
        assert cgroup_file(container, "cpu.max") == "150000 100000", role
        assert cgroup_file(container, "memory.max") == str(512 * 2**20), role
        assert cgroup_file(container, "memory.low") == str(256 * 2**20), role
        assert cgroup_file(container, "pids.max") == str(pids), role
        assert int(cgroup_file(container, "cpu.weight")) < 100, role  # 250m of shares: below a full core's
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


# The main process: killed at the memory limit on its first run, a plain exit 3 on the next.
OOM_ONCE = ("import os\n"
            "if os.path.exists('/sandbox/oom-once'): raise SystemExit(3)\n"
            "open('/sandbox/oom-once', 'w').close()\n"
            "held = []\n"
            "while True: held.append(bytearray(1 << 20))\n")


def test_an_oom_kill_is_said_of_its_own_run(make_podmand: Callable[..., Podmand],
                                            podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """The main process killed at the sandbox's memory limit is OOMKilled. Podman keeps the
    container's State.OOMKilled set through the next start (it never clears it), and that
    run's plain exit is reported as what it is, on the stream and by GetSandbox."""
    daemon = make_podmand()
    watch = daemon.watch()
    box = sandbox(command=["/usr/bin/python3", "-c", OOM_ONCE])
    box.spec.template.resources.CopyFrom(pb.DriverResourceRequirements(memory_limit="256Mi"))
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    cond = watch.wait_reason(box.id, "OOMKilled", 240).status.conditions[0]
    assert (cond.status, cond.message) == ("False", "Container was killed by the OOM killer"), cond
    [workload] = containers_of(podman_client, box.id)

    def state() -> dict[str, Any]:
        found: dict[str, Any] = podman_client.containers.get(workload.id).attrs["State"]
        return found

    first = state()
    assert first["OOMKilled"], first

    generation = "g0000000000000002"
    daemon.stub.StartSandbox(pb.StartSandboxRequest(
        sandbox_id=box.id, generation_id=generation,
        launch_authentication=Launch(sandbox_id=box.id, generation=generation).bundle()))
    wait_until(lambda: state()["StartedAt"] != first["StartedAt"] and state()["Status"] == "exited", 240,
               "the second run's end", state)
    second = state()
    assert second["OOMKilled"] and second["ExitCode"] == 3, f"Podman kept its flag: {second}"
    cond = watch.wait_reason(box.id, "ContainerExited", 60).status.conditions[0]
    assert cond.message == "Container exited with code 3", cond
    got = daemon.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox.status.conditions[0]
    assert (got.reason, got.message) == ("ContainerExited", "Container exited with code 3"), got
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


@contextlib.contextmanager
def unit_stopped_after(session: UserSession, unit: str, files: list[Path]) -> Iterator[None]:
    """Stop ``unit`` and remove its ``files`` afterwards, whatever the test did."""
    try:
        yield
    finally:
        session.systemctl("stop", unit, check=False)
        session.systemctl("reset-failed", unit, check=False)
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                if f.is_dir():
                    shutil.rmtree(f)
                else:
                    f.unlink()
        session.systemctl("daemon-reload", check=False)


def images_env(prefix: str) -> str:
    """The test images as ``prefix``KEY=VALUE lines (a unit drop-in's Environment)."""
    env = {"OPENSHELL_SANDBOX_IMAGE": SANDBOX_IMAGE, "OPENSHELL_SUPERVISOR_IMAGE": SUPERVISOR_IMAGE,
           "OPENSHELL_SANDBOX_RUNTIME_IMAGE": RUNTIME_IMAGE, "OPENSHELL_STOP_TIMEOUT": "5"}
    return "".join(f"{prefix}{k}={v}\n" for k, v in env.items())


def test_the_pex_as_a_user_service(session: UserSession, pex_file: Path, podman_client: podman.PodmanClient) -> None:
    """containers/systemd/podmand.service as its header says to install it: systemd starts it
    (Type=notify: the start returns once podmand's READY=1 arrived), it serves on its socket
    through the socket-activated Podman without starting a Podman of its own, a sandbox it made
    survives a restart of the unit and a crash (Restart=on-failure), and a stop ends it cleanly."""
    unit = session.install((UNITS / "podmand.service").read_text(), ".config/systemd/user/podmand.service")
    dropin = session.install("[Service]\n" + images_env("Environment="),
                             ".config/systemd/user/podmand.service.d/images.conf")
    binary = session.home / ".local" / "bin" / "podmand"
    session.install("", ".local/bin/podmand")
    shutil.copy(pex_file, binary)
    binary.chmod(0o755)
    socket = session.runtime / "podmand" / "compute-driver.sock"
    box = sandbox()
    with unit_stopped_after(session, "podmand.service", [unit, dropin.parent, binary]):
        # Podman is not running: the first call podmand makes starts it, through the socket.
        session.systemctl("stop", "podman.service")
        session.systemctl("daemon-reload")
        session.systemctl("start", "podmand.service")  # returns at READY=1 (Type=notify)
        state = session.show("podmand.service", "ActiveState", "SubState", "Type", "MainPID", "ControlGroup")
        assert (state["ActiveState"], state["SubState"], state["Type"]) == ("active", "running", "notify"), state
        assert "ready: serving" in session.journal("podmand.service")
        assert capabilities(socket).driver_name == "podman"  # what upstream's Podman driver names itself
        assert session.show("podman.service", "ActiveState")["ActiveState"] == "active"
        # Its cgroup holds podmand alone: no Podman service of its own (autostart stays off).
        procs = Path("/sys/fs/cgroup", state["ControlGroup"].lstrip("/"), "cgroup.procs").read_text().split()
        assert procs == [state["MainPID"]], procs

        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = pb_grpc.ComputeDriverStub(channel)
            watch = Watch(stub)
            stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
            watch.wait_reason(box.id, "ContainerRunning", 120)
            watch.cancel()
        first = state["MainPID"]
        session.systemctl("restart", "podmand.service")
        state = session.show("podmand.service", "ActiveState", "MainPID")
        assert state["ActiveState"] == "active" and state["MainPID"] != first, state
        # A crash: Restart=on-failure brings it back, and it reaches READY=1 again.
        count = str(int(session.show("podmand.service", "NRestarts")["NRestarts"]) + 1)
        session.systemctl("kill", "--signal=SIGKILL", "podmand.service")

        def restarted() -> dict[str, str] | None:
            now = session.show("podmand.service", "ActiveState", "SubState", "NRestarts", "MainPID")
            back = (now["NRestarts"], now["ActiveState"], now["SubState"]) == (count, "active", "running")
            return now if back else None

        wait_until(restarted, 60, "systemd to restart podmand after a crash",
                   lambda: session.show("podmand.service", "ActiveState", "SubState", "NRestarts"))
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = pb_grpc.ComputeDriverStub(channel)
            snap = stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id), timeout=60).sandbox
            ready = [c for c in snap.status.conditions if c.type == "Ready"]
            assert ready and ready[0].reason == "ContainerRunning", snap.status
            assert stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id), timeout=120).deleted
        assert not pair_of(podman_client, box.id)
        session.systemctl("stop", "podmand.service")
        state = session.show("podmand.service", "ActiveState", "Result")
        assert (state["ActiveState"], state["Result"]) == ("inactive", "success"), state


def test_the_quadlet_form(session: UserSession, podman_client: podman.PodmanClient) -> None:
    """containers/systemd/podmand.container through Podman's Quadlet generator: daemon-reload
    makes podmand.service of it, its start returns once podmand's READY=1 came through Podman
    (Notify=true), the sidecar serves on the shared socket, Podman's own healthcheck timer runs
    its HealthCmd to healthy, and a restart of the unit serves again."""
    if not podman_client.images.exists(SIDECAR_IMAGE):
        pytest.fail(f"{SIDECAR_IMAGE} missing: the VM lane loads it (tests/setup-vm.sh)")
    quadlet = session.install((UNITS / "podmand.container").read_text(), ".config/containers/systemd/podmand.container")
    socket = session.runtime / "podmand" / "compute-driver.sock"
    with unit_stopped_after(session, "podmand.service", [quadlet]):
        session.systemctl("daemon-reload")
        generated = session.systemctl("cat", "podmand.service").stdout
        assert "--sdnotify=container" in generated and "podman run" in generated.replace("\\\n", " ")
        session.systemctl("start", "podmand.service")
        state = session.show("podmand.service", "ActiveState", "SubState", "Type")
        assert (state["ActiveState"], state["Type"]) == ("active", "notify"), state
        assert capabilities_as_user(session, socket) == "podman"
        with pytest.raises(grpc.RpcError) as refused:  # root, from outside the user's namespace
            capabilities(socket)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        container = podman_client.containers.get("podmand")

        def healthy() -> bool:
            container.reload()
            return bool(container.attrs["State"].get("Health", {}).get("Status") == "healthy")

        wait_until(healthy, 120, "Podman's healthcheck timer to find the sidecar healthy",
                   lambda: container.attrs["State"].get("Health"))
        timers = session.systemctl("list-timers", "--all", "--no-legend", "--plain").stdout
        assert container.id in timers, timers
        session.systemctl("restart", "podmand.service")
        assert session.show("podmand.service", "ActiveState")["ActiveState"] == "active"
        assert capabilities_as_user(session, socket) == "podman"


def doctor(daemon: Podmand) -> dict[str, dict[str, str]]:
    proc = subprocess.run(daemon.command("doctor", "--json"), capture_output=True, text=True, timeout=120 * SCALE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {c["name"]: c for c in json.loads(proc.stdout)}


def test_doctor_on_a_systemd_host(make_podmand: Callable[..., Podmand], session: UserSession) -> None:
    """doctor reads this host as it is: limits enforced, journald events that arrive, and, when
    podmand probes health itself, Podman's own timers on the socket-activated podman.service,
    with a fix that, run as written, turns them off (the next doctor says so)."""
    daemon = make_podmand({"OPENSHELL_HEALTH_CHECK_INTERVAL_SECS": "2"}, start=False)
    checks = doctor(daemon)
    assert [c for c in checks.values() if c["status"] == "FAIL"] == [], checks
    assert checks["events"]["status"] == "OK" and "journald" in checks["events"]["finding"], checks["events"]
    timers = checks["health timers"]
    assert timers["status"] == "WARN" and "podman.service" in timers["finding"], timers
    fix = re.search(r"as the Podman user: (.*?) \(sandboxes started", timers["fix"])
    assert fix, timers
    dropin = session.home / ".config/systemd/user/podman.service.d"
    try:
        session.run("sh", "-c", fix.group(1))  # as doctor wrote it
        timers = doctor(daemon)["health timers"]
        assert timers["status"] == "OK" and "DISABLE_HC_SYSTEMD=true" in timers["finding"], timers
    finally:
        shutil.rmtree(dropin, ignore_errors=True)
        session.systemctl("daemon-reload")
        session.systemctl("restart", "podman.service")
