"""The core contract end to end: the pex, rootless Podman, userns=auto, each sandbox a pair
(workload and supervisor containers, a channel volume beside the workspace volume)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
from collections.abc import Callable
from typing import Any

import grpc
import podman
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch

from .conftest import (
    USER,
    Podmand,
    containers_of,
    gateway_metadata,
    pair_of,
    ready,
    run_in,
    sandbox,
    volumes_of,
    wait_until,
)

READY = 120.0  # a pair's first start: two containers, TLS on both sides, on a shared 2-core machine


def test_capabilities_negotiate(driver: Podmand) -> None:
    """A contract gateway is accepted; the answer is byte-stable; others are refused."""
    stub = driver.stub
    first = stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    second = stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    assert first.SerializeToString(deterministic=True) == second.SerializeToString(deterministic=True)
    assert "openshell.compute.contract" in first.extension.supported_capabilities
    assert first.resource_admission_policy.startswith('v1:{"allow_driver_config":false,')
    assert first.default_image == "localhost/podmand-test/sandbox:1"
    with pytest.raises(grpc.RpcError) as err:
        stub.GetCapabilities(pb.GetCapabilitiesRequest())
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    wrong = gateway_metadata()
    wrong.protocol_version.major = 2
    with pytest.raises(grpc.RpcError) as err:
        stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=wrong))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "2.0" in (err.value.details() or "")


def test_lifecycle_userns_auto(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """create → Ready=True → stop → start → delete of the pair: the workload in a fresh
    userns=auto slice, the caller's variables reaching the main process only; delete leaves
    neither container nor volume (the channel's included)."""
    watch = driver.watch()
    box = sandbox(environment={"GREETING": "hello"},
                  command=["/bin/sh", "-c", 'echo "greeting=$GREETING"; exec sleep 600'])
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "ContainerRunning", READY)
    assert (snap.name, snap.workspace) == (box.name, box.workspace)
    assert ready(snap).status == "True"
    assert ready(snap).transition_time.seconds > 0

    def steps() -> list[str]:
        return [e.metadata["openshell.progress.complete_step"] for e in watch.platform_events(box.id)
                if "openshell.progress.complete_step" in e.metadata]

    # The last step is published once the create returns; a look at the started pair (an event
    # of its start) may come first.
    wait_until(lambda: len(steps()) >= 3, 10, "the three progress steps", steps)
    assert steps() == ["requesting_sandbox", "pulling_image", "starting_sandbox"]

    [container] = containers_of(podman_client, box.id)
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    ids = {container.id, supervisor.id}
    # userns=auto: the workload's root is a fresh 1024-id slice, not the rootless user's root.
    code, out, err = run_in(container, ["/bin/cat", "/proc/1/uid_map"])
    uid_map = out.split()
    assert code == 0 and uid_map[0] == "0" and uid_map[1] != "0" and uid_map[2] == "1024", (uid_map, err)
    # The caller's variables: the main process's (its output in the workload's log), in no
    # container's environment; the supervisor has them only as OPENSHELL_USER_ENVIRONMENT.
    wait_until(lambda: "greeting=hello" in workload_log(container), what="the main process's output")
    env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
    assert "GREETING" not in env and not any(k.startswith("OPENSHELL_") for k in env), env
    sup_env = dict(e.split("=", 1) for e in supervisor.attrs["Config"]["Env"])
    assert json.loads(sup_env["OPENSHELL_USER_ENVIRONMENT"]) == {"GREETING": "hello"}
    assert "GREETING" not in sup_env

    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id, name=box.name))
    assert {c.status for c in pair_of(podman_client, box.id)} == {"exited"}
    stopped = driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox
    conds = {c.type: (c.status, c.reason) for c in stopped.status.conditions}
    assert conds == {"Ready": ("False", "ContainerStopped"), "Suspended": ("True", "ContainerStopped")}
    listed = {s.id: s for s in driver.stub.ListSandboxes(pb.ListSandboxesRequest()).sandboxes}
    assert ready(listed[box.id]).reason == "ContainerStopped"
    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))  # idempotent

    # a start carries the gateway's new launch bundle (the split topology's session)
    bundle = Launch(sandbox_id=box.id).bundle()
    driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, name=box.name, launch_authentication=bundle))
    driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, launch_authentication=bundle))  # idempotent
    watch.wait_reason(box.id, "ContainerRunning", READY)
    assert {c.id for c in pair_of(podman_client, box.id)} == ids  # the same two containers, started again
    assert {c.status for c in pair_of(podman_client, box.id)} == {"running"}
    assert sorted(v.name for v in volumes_of(podman_client, box.id)) == [
        names.channel_volume_name(box.id), names.volume_name(box.id)]

    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted is True
    wait_until(lambda: watch.deleted(box.id), what="Deleted event")
    assert pair_of(podman_client, box.id) == []
    assert volumes_of(podman_client, box.id) == []
    assert not (driver.state_dir / "sandboxes" / box.id).exists()
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted is False
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    watch.cancel()


def workload_log(container: Any) -> str:
    return b"".join(container.logs(stdout=True, stderr=True)).decode(errors="replace")


BAD = [
    (pb.DriverSandbox(id="", name="x", spec=pb.DriverSandboxSpec()), "sandbox.id"),
    (pb.DriverSandbox(id="bad id", name="x", spec=pb.DriverSandboxSpec()), "sandbox.id"),
    (pb.DriverSandbox(id="sb-bad-name", name="a/b", spec=pb.DriverSandboxSpec()), "sandbox.name"),
    (pb.DriverSandbox(id="sb-no-spec", name="x"), "sandbox.spec"),
    (sandbox("sb-bad-env", environment={"A=B": "1"}), "sandbox.spec.environment"),
    (
        pb.DriverSandbox(
            id="sb-bad-cpu",
            name="x",
            spec=pb.DriverSandboxSpec(
                launch_authentication=Launch(sandbox_id="sb-bad-cpu").bundle(),
                template=pb.DriverSandboxTemplate(resources=pb.DriverResourceRequirements(cpu_limit="NaN"))
            ),
        ),
        "sandbox.spec.template.resources.cpu_limit",
    ),
    (
        pb.DriverSandbox(
            id="sb-bad-mem",
            name="x",
            spec=pb.DriverSandboxSpec(
                launch_authentication=Launch(sandbox_id="sb-bad-mem").bundle(),
                template=pb.DriverSandboxTemplate(resources=pb.DriverResourceRequirements(memory_limit="lots"))
            ),
        ),
        "sandbox.spec.template.resources.memory_limit",
    ),
    (
        pb.DriverSandbox(
            id="sb-bad-gpu",
            name="x",
            spec=pb.DriverSandboxSpec(
                launch_authentication=Launch(sandbox_id="sb-bad-gpu").bundle(),
                resource_requirements=pb.ResourceRequirements(gpu=pb.GpuResourceRequirements(count=0))
            ),
        ),
        "sandbox.spec.resource_requirements.gpu.count",
    ),
]


def made_for(client: podman.PodmanClient, sandbox_id: str) -> set[str]:
    """Containers and volumes labelled with ``sandbox_id`` or named after it: what a create of
    it would make (the store is shared: other sessions' objects come and go meanwhile)."""
    found = set()
    for kind, items in (("container", client.containers.list(all=True)), ("volume", client.volumes.list())):
        for item in items:
            labels = (item.labels if kind == "container" else item.attrs.get("Labels")) or {}
            name = item.name or ""
            if labels.get("openshell.ai/sandbox-id") == sandbox_id or (sandbox_id and sandbox_id in name):
                found.add(f"{kind}:{item.id}")
    return found


@pytest.mark.parametrize(("box", "field"), BAD, ids=[f for _, f in BAD])
def test_invalid_argument_creates_nothing(
    driver: Podmand, podman_client: podman.PodmanClient, box: pb.DriverSandbox, field: str
) -> None:
    """Each bad field is named in INVALID_ARGUMENT, and nothing reaches Podman or the state dir."""
    before = made_for(podman_client, box.id)
    for call in (driver.stub.ValidateSandboxCreate, driver.stub.CreateSandbox):
        request = (
            pb.ValidateSandboxCreateRequest(sandbox=box)
            if call is driver.stub.ValidateSandboxCreate
            else pb.CreateSandboxRequest(sandbox=box)
        )
        with pytest.raises(grpc.RpcError) as err:
            call(request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (err.value.details() or "").startswith(field), err.value.details()
    assert made_for(podman_client, box.id) == before
    assert not (driver.state_dir / "sandboxes" / box.id).exists() if box.id else True


def test_create_twice(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """Same id and spec: OK; same id, other spec: ALREADY_EXISTS with the live pair untouched."""
    watch = driver.watch()
    box = sandbox()
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", READY)
    before = {c.id for c in pair_of(podman_client, box.id)}
    assert len(before) == 2
    other = pb.DriverSandbox()
    other.CopyFrom(box)
    other.spec.command[:] = ["sleep", "1"]
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=other))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    retry = pb.DriverSandbox()  # the same request under a bundle of its own: the same spec
    retry.CopyFrom(box)
    retry.spec.launch_authentication = Launch(sandbox_id=box.id).bundle()
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=retry))
    same = pair_of(podman_client, box.id)
    assert {c.id for c in same} == before and {c.status for c in same} == {"running"}
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_natural_exit_is_reported(driver: Podmand, cleanup: list[str]) -> None:
    """A main process that exits by itself shows as ContainerExited with its code (upstream misses it)."""
    watch = driver.watch()
    box = sandbox(command=["sh", "-c", "sleep 1; exit 3"])
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "ContainerExited", READY)
    assert ready(snap).status == "False"
    assert "3" in ready(snap).message
    # podmand found conmon's exit directory from the real conmon, and watches it.
    uid = pwd.getpwnam(USER).pw_uid
    assert f"watching conmon's exit files in /run/user/{uid}/libpod/tmp/exits" in driver.logs()
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_missing_image_fails_visibly(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """A pull failure is a terminal Ready=False with an actionable message; delete leaves nothing."""
    watch = driver.watch()
    box = sandbox(image="localhost/podmand-test/does-not-exist:1")
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "ImagePullFailed", timeout=60)
    assert "localhost/podmand-test/does-not-exist:1" in ready(snap).message
    got = driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox
    assert ready(got).reason == "ImagePullFailed"
    assert any(e.type == "Warning" and e.reason == "ImagePullFailed" for e in watch.platform_events(box.id))
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted is True
    assert pair_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []
    assert not (driver.state_dir / "sandboxes" / box.id).exists()


def test_out_of_band_removal_yields_deleted(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """A workload removed behind podmand's back: Deleted, after podmand's own leftovers are
    gone (its supervisor, the channel and workspace volumes, the state files)."""
    watch = driver.watch()
    box = sandbox()
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", READY)
    [container] = containers_of(podman_client, box.id)
    container.remove(force=True)
    wait_until(lambda: watch.deleted(box.id), what="Deleted after out-of-band removal")
    assert pair_of(podman_client, box.id) == []
    assert volumes_of(podman_client, box.id) == []
    assert not (driver.state_dir / "sandboxes" / box.id).exists()


def test_workloads_share_no_network(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """A workload has no network but its own loopback: a server in one sandbox is out of
    reach of another in the same workspace, and no workspace network is made."""
    watch = driver.watch()
    before = {n.name for n in podman_client.networks.list()}
    server = sandbox(workspace="wsa", command=["httpd", "-f", "-p", "8080", "-h", "/etc"])
    peer = sandbox(workspace="wsa")
    for box in (server, peer):
        cleanup.append(box.id)
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    for box in (server, peer):
        watch.wait_reason(box.id, "ContainerRunning", READY)
    [srv] = containers_of(podman_client, server.id)
    [near] = containers_of(podman_client, peer.id)
    fetch = ["/bin/sh", "-c", "printf 'GET /passwd HTTP/1.0\\r\\n\\r\\n' | nc -w 3 127.0.0.1 8080"]
    # the server answers on its own loopback (as the main process, once the runtime started it)
    wait_until(lambda: "root:x:0:0" in run_in(srv, fetch)[1], what="the server on its loopback")
    assert "root:x:0:0" not in run_in(near, fetch)[1]
    for container in (srv, near):
        assert container.attrs["HostConfig"]["NetworkMode"] == "none"
        code, out, err = run_in(container, ["/bin/ls", "/sys/class/net"])
        assert (code, out.split()) == (0, ["lo"]), err
    assert {n.name for n in podman_client.networks.list()} <= before  # (an older podmand's may be there)
    for box in (server, peer):
        assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


@pytest.mark.parametrize("userns", ["host", "keep-id"])
def test_pair_in_other_userns_modes(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str], userns: str
) -> None:
    """The operator's other user namespace modes: the pair gets Ready, the workload in the mode asked
    (host: the rootless user's own namespace, its root the user; keep-id: the user at its own id)."""
    daemon = make_podmand({"OPENSHELL_PODMAN_USERNS": userns, "PODMAND_ALLOW_USERNS_OWN_UID": "true"})
    watch = daemon.watch()
    box = sandbox()
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", READY)
    [container] = containers_of(podman_client, box.id)
    code, out, err = run_in(container, ["/bin/cat", "/proc/1/uid_map"])
    assert code == 0, err
    inside = [tuple(int(n) for n in line.split()) for line in out.splitlines()]
    uid = pwd.getpwnam(USER).pw_uid
    if userns == "host":  # the rootless user's namespace itself: its root is the user
        assert inside[0][:3] == (0, uid, 1), inside
    else:  # keep-id: the user (the rootless namespace's 0) at its own uid, root a subordinate id
        assert (uid, 0, 1) in inside and inside[0][:2] == (0, 1), inside
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    assert pair_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []


def test_rootful_userns_auto(make_podmand: Callable[..., Podmand], cleanup: list[str]) -> None:
    """Rootful Podman with userns=auto: the same contract, podmand running as root."""
    rootful = os.environ.get("PODMAN_ROOTFUL_SOCK", "/run/podman/podman.sock")
    daemon = make_podmand(user=None, socket=rootful)
    watch = daemon.watch()
    box = sandbox()
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    with podman.PodmanClient(base_url=f"unix://{rootful}") as client:
        try:
            watch.wait_reason(box.id, "ContainerRunning", READY)
            [container] = containers_of(client, box.id)
            code, out, err = run_in(container, ["/bin/cat", "/proc/1/uid_map"])
            uid_map = out.split()
            assert code == 0 and uid_map[1] != "0" and uid_map[2] == "1024", (uid_map, err)
            assert len(pair_of(client, box.id)) == 2
            daemon.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
            assert {c.status for c in pair_of(client, box.id)} == {"exited"}
            daemon.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id,
                                                            launch_authentication=Launch(sandbox_id=box.id).bundle()))
            watch.wait_reason(box.id, "ContainerRunning", READY)
            assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
            assert pair_of(client, box.id) == [] and volumes_of(client, box.id) == []
        finally:  # the rootless `cleanup` fixture cannot see the rootful store
            for item in [*pair_of(client, box.id), *volumes_of(client, box.id)]:
                with contextlib.suppress(podman.errors.NotFound, podman.errors.APIError):
                    item.remove(force=True)


def test_pull_policy_never_names_missing_image(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient
) -> None:
    """A missing image under pull policy 'never' is FAILED_PRECONDITION naming it; nothing is created."""
    daemon = make_podmand({"OPENSHELL_SANDBOX_IMAGE_PULL_POLICY": "never"})
    box = sandbox(image="localhost/podmand-test/absent:1")
    with pytest.raises(grpc.RpcError) as err:
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "localhost/podmand-test/absent:1" in (err.value.details() or "")
    assert volumes_of(podman_client, box.id) == []
    assert not (daemon.state_dir / "sandboxes" / box.id).exists()


def test_workspace_rpcs_and_health(driver: Podmand, podman_client: podman.PodmanClient) -> None:
    """EnsureWorkspace succeeds (idempotently) and makes no network (a workload has none),
    DeleteWorkspace too; a bad name is INVALID_ARGUMENT; AuthenticateSandbox is UNIMPLEMENTED
    (the gateway answers it: contract §1.2) and its credential never logged; health says
    SERVING; reflection lists the services."""
    before = {n.name for n in podman_client.networks.list()}
    driver.stub.EnsureWorkspace(pb.EnsureWorkspaceRequest(workspace="wsx"))
    driver.stub.EnsureWorkspace(pb.EnsureWorkspaceRequest(workspace="wsx"))
    assert "openshell-wsx" not in {n.name for n in podman_client.networks.list()}
    driver.stub.DeleteWorkspace(pb.DeleteWorkspaceRequest(workspace="wsx"))
    assert {n.name for n in podman_client.networks.list()} <= before
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.EnsureWorkspace(pb.EnsureWorkspaceRequest(workspace="../x"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "workspace" in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.AuthenticateSandbox(pb.AuthenticateSandboxRequest(credential="secret-credential"))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "secret-credential" not in driver.logs()
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(f"unix://{driver.socket}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "openshell.compute.v1.ComputeDriver"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service))
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        # Reflection is on, so grpcurl and friends work without the protos.
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        [reply] = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        services = {s.name for s in reply.list_services_response.service}
        assert {"openshell.compute.v1.ComputeDriver", "grpc.health.v1.Health"} <= services
