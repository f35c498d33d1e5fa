"""Trust material end to end: token delivery (the launch bundle itself never enters the
sandbox), podmand's bootstrap credential and AuthenticateSandbox, runtime identity, workload
identity and fence evidence, environment hygiene."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.jwt import make_launch

from .conftest import SANDBOX_IMAGE, Podmand, containers_of, ready, run_in, sandbox

AUTH = "/etc/openshell/auth"


def launched(generation: str = "g0000000000000001", **kwargs: Any) -> pb.DriverSandbox:
    box = sandbox(token=True, **kwargs)
    box.spec.launch_authentication = make_launch(box.id, generation)
    box.spec.sandbox_token = json.loads(box.spec.launch_authentication)["supervisor"]["gateway_token"]
    return box


def credential_of(container: Any) -> str:
    code, out, _ = run_in(container, ["cat", f"{AUTH}/driver.credential"])
    assert code == 0
    return out.strip()


def authenticate(driver: Podmand, credential: str) -> pb.AuthenticateSandboxResponse:
    return driver.stub.AuthenticateSandbox(pb.AuthenticateSandboxRequest(credential=credential))


def unauthenticated(driver: Podmand, credential: str) -> str:
    with pytest.raises(grpc.RpcError) as err:
        authenticate(driver, credential)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    return err.value.details() or ""


@pytest.mark.parametrize("userns", ["auto", "host"])
def test_secrets_reach_only_container_root(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                                           cleanup: list[str], userns: str) -> None:
    """The token and podmand's credential are root-only files; the bundle and neither secret is in
    any env, label, inspect or log, nor visible to a neighbour."""
    daemon = make_podmand({"OPENSHELL_PODMAN_USERNS": userns, "PODMAND_ALLOW_USERNS_OWN_UID": "true"})
    watch = daemon.watch()
    mine, other, bare = launched(), launched(), sandbox()
    for box in (mine, other, bare):
        cleanup.append(box.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    for box in (mine, other, bare):
        watch.wait_reason(box.id, "ContainerRunning")
    [container] = containers_of(podman_client, mine.id)
    [neighbour] = containers_of(podman_client, other.id)
    [bootstrap] = containers_of(podman_client, bare.id)
    bundle = json.loads(mine.spec.launch_authentication)
    secrets = [mine.spec.sandbox_token, bundle["supervisor"]["sandbox_token"], credential_of(bootstrap)]
    assert run_in(container, ["cat", f"{AUTH}/sandbox.jwt"])[1].strip() == mine.spec.sandbox_token
    assert run_in(container, ["ls", AUTH])[1].split() == ["sandbox.jwt"]  # the bundle is not delivered
    for box, path in ((container, "sandbox.jwt"), (bootstrap, "driver.credential")):
        code, out, err = run_in(box, ["cat", f"{AUTH}/{path}"], user="1000")
        assert code != 0 and out == "" and "Permission denied" in err, path
    seen_by_neighbour = "".join(run_in(neighbour, ["cat", f"{AUTH}/{p}"])[1]
                                for p in ("sandbox.jwt", "driver.credential"))
    exposed = [json.dumps(podman_client.containers.get(c.id).attrs) for c in (container, bootstrap)]
    exposed += [daemon.logs(), seen_by_neighbour, run_in(container, ["cat", "/proc/1/environ"])[1]]
    exposed += [logs_of(c) for c in (container, neighbour, bootstrap)]
    for secret in secrets:
        for text in exposed:
            assert secret not in text
    for box in (mine, other, bare):
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def logs_of(container: Any) -> str:
    return b"".join(container.logs(stdout=True, stderr=True)).decode(errors="replace")


def test_authenticate_and_rotation(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """The delivered credential authenticates; tampered, other-sandbox, old-generation, deleted and junk
    credentials do not; stop/start rotates it, and the identity follows the generation. (No gateway
    token: the supervisor's only token source is podmand's credential.)"""
    watch = driver.watch()
    box, other = sandbox(), sandbox()
    for b in (box, other):
        cleanup.append(b.id)
    created = driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box)).runtime_identity
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=other))
    assert created.endswith("/0")
    assert driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box)).runtime_identity == created
    for b in (box, other):
        watch.wait_reason(b.id, "ContainerRunning")
    [container] = containers_of(podman_client, box.id)
    first = credential_of(container)
    answer = authenticate(driver, first)
    assert (answer.sandbox_id, answer.runtime_identity) == (box.id, created)

    prefix, payload, signature = first.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = dict(claims, sid=other.id)
    forged_payload = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    unauthenticated(driver, f"{prefix}.{forged_payload}.{signature}")  # other sandbox, signature does not match
    unauthenticated(driver, f"{prefix}.{payload}.{signature[::-1]}")  # wrong signature
    assert first not in unauthenticated(driver, first + "x")
    unauthenticated(driver, "not-a-credential")

    snap = driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox
    identity = snap.status.resolved_identity
    # Nothing requested: the image's USER sandbox, as the supervisor resolves it, pinned to the image ID.
    got = (identity.uid, identity.gid, list(identity.supplementary_gids), identity.source)
    assert got == (1000, 1000, [1000, 1001], "image")
    assert identity.resource_digest == podman_client.images.get(SANDBOX_IMAGE).id
    fence = snap.status.fence_evidence
    assert fence.generation == "0" and fence.evidence_digest.startswith("sha256:")
    assert fence.resource_claims["podman.container_id"] == container.id
    assert fence.resource_claims["podman.no_new_privileges"] == "true"

    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, expected_runtime_identity="podmand:gone/x"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert podman_client.containers.get(container.id).status == "exited"  # nothing started
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, generation_id="Bad_Generation"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    started = driver.stub.StartSandbox(pb.StartSandboxRequest(
        sandbox_id=box.id, generation_id="g0000000000000002", expected_runtime_identity=created,
        launch_authentication=make_launch(box.id, "g0000000000000002"))).runtime_identity
    assert started.split("/")[0] == created.split("/")[0] and started.endswith("/g0000000000000002")
    watch.wait_reason(box.id, "ContainerRunning")
    assert "earlier start" in unauthenticated(driver, first)  # old generation
    second = credential_of(containers_of(podman_client, box.id)[0])
    assert second != first
    assert authenticate(driver, second).runtime_identity == started
    again = driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, generation_id="g0000000000000002"))
    assert again.runtime_identity == started  # idempotent retry of a running sandbox, no bundle needed
    moved = driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox.status.fence_evidence
    assert moved.generation == "g0000000000000002" and moved.evidence_digest != fence.evidence_digest

    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    assert "no longer exists" in unauthenticated(driver, second)  # deleted sandbox
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=other.id)).deleted


def test_root_image_user_is_refused(driver: Podmand, podman_client: podman.PodmanClient,
                                    cleanup: list[str]) -> None:
    """An image whose Config.User was edited to 0 is refused at validation, naming it;
    a policy user from the image's passwd overrides it."""
    base = podman_client.containers.create(SANDBOX_IMAGE, ["true"])
    try:
        base.commit(repository="localhost/podmand-test/rootuser", tag="1", changes=["USER=0"])
    finally:
        base.remove(force=True)
    box = sandbox(image="localhost/podmand-test/rootuser:1")
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=box))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "OCI USER '0' selects UID 0" in (err.value.details() or "")
    # the policy's user and group win; the gateway gives them to podmand and, in the policy, to
    # the supervisor (the stand-in reads the policy from its STANDIN_POLICY_* knobs)
    named = sandbox(image="localhost/podmand-test/rootuser:1", token=True,
                    workload_identity=pb.WorkloadIdentityRequest(user="sandbox", group="extra"),
                    environment={"STANDIN_POLICY_RUN_AS_USER": "sandbox", "STANDIN_POLICY_RUN_AS_GROUP": "extra"})
    cleanup.append(named.id)
    driver.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=named))
    watch = driver.watch()
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=named))
    snap = watch.wait_reason(named.id, "ContainerRunning")
    got = snap.status.resolved_identity
    assert (got.uid, got.gid, got.source) == (1000, 1001, "policy")
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=named.id)).deleted
    # A name the image lacks needs its account files, which validation never reads (it allocates
    # nothing): provisioning refuses it, terminally, before any container exists.
    unknown = sandbox(workload_identity=pb.WorkloadIdentityRequest(user="nobody-here", group="extra"), token=True)
    cleanup.append(unknown.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=unknown))
    snap = watch.wait_reason(unknown.id, "WorkloadIdentityInvalid")
    assert "nobody-here" in ready(snap).message and containers_of(podman_client, unknown.id) == []
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=unknown.id)).deleted


def test_env_cannot_steer_the_supervisor(driver: Podmand, podman_client: podman.PodmanClient,
                                         cleanup: list[str]) -> None:
    """Template or sandbox env of OPENSHELL_ENDPOINT=evil or LD_PRELOAD=x, or an image ENV LD_PRELOAD,
    never reaches the supervisor's environment; SSH sessions get the user's values as JSON."""
    base = podman_client.containers.create(SANDBOX_IMAGE, ["true"])
    try:
        base.commit(repository="localhost/podmand-test/preload", tag="1", changes=["ENV=LD_PRELOAD=/evil.so"])
    finally:
        base.remove(force=True)
    watch = driver.watch()
    box = sandbox(image="localhost/podmand-test/preload:1", environment={"LD_PRELOAD": "x"}, token=True)
    box.spec.template.environment.update({"OPENSHELL_ENDPOINT": "evil", "APP": "1"})
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    [container] = containers_of(podman_client, box.id)
    environ = dict(item.split("=", 1) for item in run_in(container, ["cat", "/proc/1/environ"])[1].split("\0") if item)
    assert "LD_PRELOAD" not in environ
    assert environ["OPENSHELL_ENDPOINT"] != "evil"
    user_env = json.loads(environ["OPENSHELL_USER_ENVIRONMENT"])
    assert user_env == {"LD_PRELOAD": "x", "OPENSHELL_ENDPOINT": "evil", "APP": "1"}
    assert environ["APP"] == "1"
    assert (environ["OPENSHELL_OCI_IMAGE_USER"], environ["OPENSHELL_SANDBOX_UID"], environ["OPENSHELL_SANDBOX_GID"]) \
        == ("sandbox", "", "")
    assert ready(driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox).status == "True"
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
