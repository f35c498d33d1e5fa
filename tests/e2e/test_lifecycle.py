"""The core contract end to end: the pex, rootless Podman, userns=auto."""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
from collections.abc import Callable

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand.host import capacity
from tests.jwt import make_token

from .conftest import USER, Podmand, containers_of, gateway_metadata, ready, run_in, sandbox, volumes_of, wait_until


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
    """create → Ready=True → stop → start → delete, with the token only for container root."""
    watch = driver.watch()
    box = sandbox(token=True, environment={"GREETING": "hello"})
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "ContainerRunning")
    assert (snap.name, snap.workspace) == (box.name, box.workspace)
    assert ready(snap).status == "True"
    assert ready(snap).transition_time.seconds > 0
    steps = [
        e.metadata["openshell.progress.complete_step"]
        for e in watch.platform_events(box.id)
        if "openshell.progress.complete_step" in e.metadata
    ]
    assert steps == ["requesting_sandbox", "pulling_image", "starting_sandbox"]

    [container] = containers_of(podman_client, box.id)
    container_id = container.id
    attrs = podman_client.containers.get(container_id).attrs
    # userns=auto: container root is a fresh 1024-id slice, not the rootless user's root.
    uid_map = run_in(container, ["cat", "/proc/1/uid_map"])[1].split()
    assert uid_map[0] == "0" and uid_map[1] != "0" and uid_map[2] == "1024", uid_map

    code, out, _ = run_in(container, ["cat", "/etc/openshell/auth/sandbox.jwt"])
    assert (code, out.strip()) == (0, box.spec.sandbox_token)
    code, out, err = run_in(container, ["cat", "/etc/openshell/auth/sandbox.jwt"], user="1000")
    assert code != 0 and out == "" and "Permission denied" in err
    inspect_text = json.dumps(podman_client.containers.get(container_id).attrs)
    assert box.spec.sandbox_token not in inspect_text
    assert box.spec.sandbox_token not in driver.logs()
    env = dict(e.split("=", 1) for e in attrs["Config"]["Env"])
    assert env["OPENSHELL_SANDBOX_TOKEN_FILE"] == "/etc/openshell/auth/sandbox.jwt"
    assert json.loads(env["OPENSHELL_USER_ENVIRONMENT"]) == {"GREETING": "hello"}
    assert env["GREETING"] == "hello"  # the main process gets it from the container environment
    assert run_in(container, ["test", "-S", "/run/openshell/ssh.sock"])[0] == 0

    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id, name=box.name))
    assert podman_client.containers.get(container_id).status == "exited"
    stopped = driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox
    conds = {c.type: (c.status, c.reason) for c in stopped.status.conditions}
    assert conds == {"Ready": ("False", "ContainerStopped"), "Suspended": ("True", "ContainerStopped")}
    listed = {s.id: s for s in driver.stub.ListSandboxes(pb.ListSandboxesRequest()).sandboxes}
    assert ready(listed[box.id]).reason == "ContainerStopped"
    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))  # idempotent

    driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, name=box.name))
    driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id))  # idempotent
    watch.wait_reason(box.id, "ContainerRunning")
    [again] = containers_of(podman_client, box.id)
    assert again.id == container_id
    assert [v.name for v in volumes_of(podman_client, box.id)] == [f"openshell-sandbox-{box.id}-workspace"]

    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted is True
    wait_until(lambda: watch.deleted(box.id), what="Deleted event")
    assert containers_of(podman_client, box.id) == []
    assert volumes_of(podman_client, box.id) == []
    assert not (driver.state_dir / "sandboxes" / box.id).exists()
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted is False
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    watch.cancel()


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
                template=pb.DriverSandboxTemplate(resources=pb.DriverResourceRequirements(memory_limit="lots"))
            ),
        ),
        "sandbox.spec.template.resources.memory_limit",
    ),
    (sandbox("sb-bad-token", token="two words"), "sandbox.spec.sandbox_token"),
    (sandbox("sb-other-token", token=make_token("another-sandbox")), "sandbox.spec.sandbox_token"),
    (sandbox("sb-old-token", token=make_token("sb-old-token", exp=1_600_000_000)), "sandbox.spec.sandbox_token"),
    (
        pb.DriverSandbox(
            id="sb-bad-gpu",
            name="x",
            spec=pb.DriverSandboxSpec(
                resource_requirements=pb.ResourceRequirements(gpu=pb.GpuResourceRequirements(count=0))
            ),
        ),
        "sandbox.spec.resource_requirements.gpu.count",
    ),
]


@pytest.mark.parametrize(("box", "field"), BAD, ids=[f for _, f in BAD])
def test_invalid_argument_creates_nothing(
    driver: Podmand, podman_client: podman.PodmanClient, box: pb.DriverSandbox, field: str
) -> None:
    """Each bad field is named in INVALID_ARGUMENT, and nothing reaches Podman or the state dir."""
    before = {c.id for c in podman_client.containers.list(all=True)}
    before_volumes = {v.name for v in podman_client.volumes.list()}
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
        if box.spec.sandbox_token:
            assert box.spec.sandbox_token not in (err.value.details() or "")
    assert {c.id for c in podman_client.containers.list(all=True)} == before
    assert {v.name for v in podman_client.volumes.list()} == before_volumes
    assert not (driver.state_dir / "sandboxes" / box.id).exists() if box.id else True


def test_create_twice(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """Same id and spec: OK; same id, other spec: ALREADY_EXISTS with the live one untouched."""
    watch = driver.watch()
    box = sandbox(token=True)
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    [container] = containers_of(podman_client, box.id)
    other = pb.DriverSandbox()
    other.CopyFrom(box)
    other.spec.command[:] = ["sleep", "1"]
    other.spec.sandbox_token = make_token(box.id, jti="another")
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=other))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    [same] = containers_of(podman_client, box.id)
    assert same.id == container.id and same.status == "running"
    assert run_in(same, ["cat", "/etc/openshell/auth/sandbox.jwt"])[1].strip() == box.spec.sandbox_token
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_natural_exit_is_reported(driver: Podmand, cleanup: list[str]) -> None:
    """A main process that exits by itself shows as ContainerExited with its code (upstream misses it)."""
    watch = driver.watch()
    box = sandbox(command=["sh", "-c", "sleep 1; exit 3"])
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "ContainerExited")
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
    assert containers_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []
    assert not (driver.state_dir / "sandboxes" / box.id).exists()


def test_out_of_band_removal_yields_deleted(
    driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """A container removed behind podmand's back: Deleted, after podmand's own leftovers are gone."""
    watch = driver.watch()
    box = sandbox(token=True)
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    [container] = containers_of(podman_client, box.id)
    container.remove(force=True)
    wait_until(lambda: watch.deleted(box.id), what="Deleted after out-of-band removal")
    assert volumes_of(podman_client, box.id) == []
    assert not (driver.state_dir / "sandboxes" / box.id).exists()


def test_workspaces_are_isolated(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """Sandboxes reach each other inside a workspace, not across workspaces."""
    watch = driver.watch()
    server = sandbox(workspace="wsa", command=["httpd", "-f", "-p", "8080", "-h", "/etc"])
    peer = sandbox(workspace="wsa")
    stranger = sandbox(workspace="wsb")
    for box in (server, peer, stranger):
        cleanup.append(box.id)
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    for box in (server, peer, stranger):
        watch.wait_reason(box.id, "ContainerRunning")
    [srv] = containers_of(podman_client, server.id)
    ip = srv.attrs["NetworkSettings"]["Networks"]["openshell-wsa"]["IPAddress"]
    # busybox-static's wget crashes in glibc's resolver; nc with a literal IP does not.
    fetch = ["sh", "-c", f"printf 'GET /passwd HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ip} 8080"]
    [near] = containers_of(podman_client, peer.id)
    [far] = containers_of(podman_client, stranger.id)
    assert "root:x:0:0" in run_in(near, fetch)[1]
    assert "root:x:0:0" not in run_in(far, fetch)[1]
    # Numbered by podmand from its pool, sized for what the user's sub-ids allow (no /24 cap).
    subnets = [ipaddress.ip_network(podman_client.networks.get(f"openshell-{ws}").attrs["subnets"][0]["subnet"])
               for ws in ("wsa", "wsb")]
    pool = ipaddress.ip_network("10.128.0.0/9")
    want = capacity.workspace_prefix(0, pool, capacity.host_subids(pwd.getpwnam(USER).pw_uid), "auto")
    assert [n.prefixlen for n in subnets] == [want, want] and want < 24
    assert all(n.subnet_of(pool) for n in subnets) and not subnets[0].overlaps(subnets[1])
    for box in (server, peer, stranger):
        assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    names = {n.name for n in podman_client.networks.list()}
    assert "openshell-wsa" not in names and "openshell-wsb" not in names


@pytest.mark.parametrize("userns", ["host", "keep-id"])
def test_token_root_only_in_other_userns_modes(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str], userns: str
) -> None:
    """The token file is container-root-only whatever the user namespace mode."""
    daemon = make_podmand({"OPENSHELL_PODMAN_USERNS": userns, "PODMAND_ALLOW_USERNS_OWN_UID": "true"})
    watch = daemon.watch()
    box = sandbox(token=True)
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    [container] = containers_of(podman_client, box.id)
    assert run_in(container, ["cat", "/etc/openshell/auth/sandbox.jwt"])[1].strip() == box.spec.sandbox_token
    code, out, err = run_in(container, ["cat", "/etc/openshell/auth/sandbox.jwt"], user="1000")
    assert code != 0 and box.spec.sandbox_token not in out and "Permission denied" in err
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_rootful_userns_auto(make_podmand: Callable[..., Podmand], cleanup: list[str]) -> None:
    """Rootful Podman with userns=auto: the same contract, podmand running as root."""
    rootful = os.environ.get("PODMAN_ROOTFUL_SOCK", "/run/podman/podman.sock")
    daemon = make_podmand(user=None, socket=rootful)
    watch = daemon.watch()
    box = sandbox(token=True)
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    with podman.PodmanClient(base_url=f"unix://{rootful}") as client:
        [container] = containers_of(client, box.id)
        uid_map = run_in(container, ["cat", "/proc/1/uid_map"])[1].split()
        assert uid_map[1] != "0" and uid_map[2] == "1024", uid_map
        assert run_in(container, ["cat", "/etc/openshell/auth/sandbox.jwt"])[1].strip() == box.spec.sandbox_token
        assert run_in(container, ["cat", "/etc/openshell/auth/sandbox.jwt"], user="1000")[0] != 0
        daemon.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
        daemon.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id))
        watch.wait_reason(box.id, "ContainerRunning")
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
        assert containers_of(client, box.id) == [] and volumes_of(client, box.id) == []


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
    """EnsureWorkspace makes the workspace network (idempotently), DeleteWorkspace removes it;
    a junk credential is UNAUTHENTICATED and never logged; health says SERVING; reflection lists the services."""
    driver.stub.EnsureWorkspace(pb.EnsureWorkspaceRequest(workspace="wsx"))
    driver.stub.EnsureWorkspace(pb.EnsureWorkspaceRequest(workspace="wsx"))
    assert "openshell-wsx" in {n.name for n in podman_client.networks.list()}
    driver.stub.DeleteWorkspace(pb.DeleteWorkspaceRequest(workspace="wsx"))
    assert "openshell-wsx" not in {n.name for n in podman_client.networks.list()}
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.EnsureWorkspace(pb.EnsureWorkspaceRequest(workspace="../x"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "workspace" in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.AuthenticateSandbox(pb.AuthenticateSandboxRequest(credential="secret-credential"))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
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
