"""Trust material end to end under the split topology: no bearer token of the launch
bundle, nor a legacy ``sandbox_token`` sent beside it, reaches a workload (its files and
its processes' environments and command lines, as root and as the identity see them), a
neighbour, the supervisor's log or inspect; runtime identity, workload identity and fence
evidence across starts; environment hygiene between the caller, the image and the supervisor.

test_pair_driver.py already proves the tokens are in the supervisor's ``auth.json`` and not
in the volumes, either inspect, the workload's log or podmand's log and state directory.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.jwt import make_token
from tests.standin.launch import Launch

from .conftest import SANDBOX_IMAGE, Podmand, containers_of, pair_of, ready, run_in, sandbox, wait_until
from .test_pair_lifecycle import leaked, token_windows

READY = 120.0
# Looks through everything a process of the container could read, as the user it runs as:
# every file (but /proc, /sys, /dev) and every other process's environ and cmdline. The
# windows come reversed in argv, so that this scan's own command line holds none.
SCAN = r"""
import json, os, sys
windows = [w[::-1].encode() for w in sys.argv[1:]]
me, hits, read = str(os.getpid()), [], []
def look(path):
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 22)
    except OSError:
        return
    read.append(path)
    if any(w in data for w in windows):
        hits.append(path)
for pid in os.listdir("/proc"):
    if pid.isdigit() and pid != me:
        for name in ("environ", "cmdline"):
            look(f"/proc/{pid}/{name}")
for root, dirs, files in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for name in files:
        path = os.path.join(root, name)
        if os.path.isfile(path) and not os.path.islink(path):
            look(path)
print(json.dumps({"hits": hits, "read": read}))
"""


def scan(container: Any, windows: set[bytes], user: str) -> tuple[list[str], list[str]]:
    """(files holding a window, files read) in ``container`` as ``user``. Windows taken every
    8 bytes: any 24-byte piece of a token holds one of them."""
    code, out, err = run_in(container, ["/usr/bin/python3", "-c", SCAN, *(w.decode()[::-1] for w in windows)],
                            user=user)
    assert code == 0, err
    found = json.loads(out)
    return found["hits"], found["read"]


def sparse(windows: set[bytes], secrets: list[str]) -> set[bytes]:
    """The windows at every 8th offset of each secret's unique part (those in ``windows``)."""
    out = set()
    for secret in secrets:
        data = secret.encode()
        out |= {data[i:i + 16] for i in range(0, len(data) - 15, 8)} & windows
    return out


def unique_windows(token: str, like: str) -> set[bytes]:
    """The 16-byte windows of ``token`` that ``like`` (made the same way) does not share."""
    def windows(text: str) -> set[bytes]:
        return {text.encode()[i:i + 16] for i in range(len(text) - 15)}
    return windows(token) - windows(like)


def logs_of(container: Any) -> str:
    return b"".join(container.logs(stdout=True, stderr=True)).decode(errors="replace")


@pytest.mark.parametrize("userns", ["auto", "host"])
def test_no_secret_reaches_a_workload(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                                      cleanup: list[str], userns: str) -> None:
    """The bundle's bearer tokens, and a legacy sandbox_token the gateway sent beside it, are in
    no file or process a workload's root or identity can read, its own or a neighbour's; the
    legacy token (ignored under the split topology) is nowhere at all, the supervisor included."""
    daemon = make_podmand({"OPENSHELL_PODMAN_USERNS": userns, "PODMAND_ALLOW_USERNS_OWN_UID": "true"})
    watch = daemon.watch()
    mine, other = sandbox(), sandbox()
    legacy = make_token(mine.id, jti=uuid.uuid4().hex)
    mine.spec.sandbox_token = legacy
    for box in (mine, other):
        cleanup.append(box.id)
        daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    for box in (mine, other):
        watch.wait_reason(box.id, "ContainerRunning", READY)
    bundles = [mine.spec.launch_authentication, other.spec.launch_authentication]
    legacy_windows = unique_windows(legacy, make_token(mine.id, jti=uuid.uuid4().hex))
    bearer = token_windows(bundles)
    tokens = [json.loads(b)["supervisor"][k] for b in bundles for k in ("gateway_token", "sandbox_token")]
    windows = sparse(bearer, [t.rpartition(".")[2] for t in tokens]) | sparse(legacy_windows, [legacy])
    assert len(windows) > 20

    [sup] = containers_of(podman_client, mine.id, "supervisor")
    hits, _ = scan(sup, windows, "1000")  # the scan finds a token where it is: the supervisor's auth.json
    assert "/.openshell/supervisor/auth.json" in hits, hits
    for box in (mine, other):
        [workload] = containers_of(podman_client, box.id)
        for user in ("0", "1000"):
            hits, read = scan(workload, windows, user)
            assert hits == [], (box.id, user, hits)
            # not hollow: the image's files and the runtime's (pid 1) command line were read
            assert len(read) > 1000 and "/proc/1/cmdline" in read, (user, len(read))
            if user == "1000":  # the main process's environment (the runtime's, pid 1, is not dumpable)
                assert [p for p in read if p.endswith("/environ")], read[:20]
    exposed = {"supervisor log": logs_of(sup), "supervisor inspect": json.dumps(sup.attrs),
               "podmand's log": daemon.logs()}
    for where, text in exposed.items():
        assert not leaked(text.encode(), legacy_windows), f"the legacy token in the {where}"
    assert not leaked(exposed["supervisor log"].encode(), bearer), "a bearer token in the supervisor's log"
    for box in (mine, other):
        assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_runtime_identity_and_rotation(driver: Podmand, podman_client: podman.PodmanClient,
                                       cleanup: list[str]) -> None:
    """The runtime identity follows the bundle's generation; a start naming another identity or
    a bad generation changes nothing; the fence evidence moves with a start; a retried start is
    idempotent. AuthenticateSandbox has no credential to accept under the split topology."""
    watch = driver.watch()
    box = sandbox()
    box.spec.launch_authentication = Launch(sandbox_id=box.id, generation="g0000000000000001").bundle()
    cleanup.append(box.id)
    created = driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box)).runtime_identity
    assert created.endswith("/g0000000000000001"), created
    assert driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box)).runtime_identity == created
    watch.wait_reason(box.id, "ContainerRunning", READY)
    [container] = containers_of(podman_client, box.id)
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.AuthenticateSandbox(pb.AuthenticateSandboxRequest(credential="not-a-credential"))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED  # the gateway's to answer (contract §1.2)

    snap = driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox
    identity = snap.status.resolved_identity
    # Nothing requested: the image's USER sandbox, pinned to the image ID.
    assert (identity.uid, identity.gid, identity.source) == (1000, 1000, "image"), identity
    assert identity.resource_digest == podman_client.images.get(SANDBOX_IMAGE).id
    fence = snap.status.fence_evidence
    assert fence.generation == "g0000000000000001" and fence.evidence_digest.startswith("sha256:")
    assert fence.resource_claims["podman.container_id"] == container.id
    assert fence.resource_claims["podman.no_new_privileges"] == "true"

    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
    second = Launch(sandbox_id=box.id, generation="g0000000000000002").bundle()
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, expected_runtime_identity="podmand:gone/x",
                                                        launch_authentication=second))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert podman_client.containers.get(container.id).status == "exited"  # nothing started
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, generation_id="Bad_Generation",
                                                        launch_authentication=second))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    started = driver.stub.StartSandbox(pb.StartSandboxRequest(
        sandbox_id=box.id, generation_id="g0000000000000002", expected_runtime_identity=created,
        launch_authentication=second)).runtime_identity
    assert started.split("/")[0] == created.split("/")[0] and started.endswith("/g0000000000000002")
    watch.wait_reason(box.id, "ContainerRunning", READY)
    again = driver.stub.StartSandbox(pb.StartSandboxRequest(
        sandbox_id=box.id, generation_id="g0000000000000002",
        launch_authentication=Launch(sandbox_id=box.id, generation="g0000000000000002").bundle()))
    assert again.runtime_identity == started  # idempotent retry of a running sandbox
    moved = driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox.status.fence_evidence
    assert moved.generation == "g0000000000000002" and moved.evidence_digest != fence.evidence_digest
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


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
    # the policy's user and group win: the runtime starts the main process as them
    named = sandbox(image="localhost/podmand-test/rootuser:1",
                    workload_identity=pb.WorkloadIdentityRequest(user="sandbox", group="extra"))
    cleanup.append(named.id)
    driver.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=named))
    watch = driver.watch()
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=named))
    snap = watch.wait_reason(named.id, "ContainerRunning", READY)
    got = snap.status.resolved_identity
    assert (got.uid, got.gid, got.source) == (1000, 1001, "policy")
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=named.id)).deleted
    # A name the image lacks needs its account files, which validation never reads (it allocates
    # nothing): provisioning refuses it, terminally, before any container exists.
    unknown = sandbox(workload_identity=pb.WorkloadIdentityRequest(user="nobody-here", group="extra"))
    cleanup.append(unknown.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=unknown))
    snap = watch.wait_reason(unknown.id, "WorkloadIdentityInvalid", READY)
    assert "nobody-here" in ready(snap).message and pair_of(podman_client, unknown.id) == []
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=unknown.id)).deleted


def test_env_cannot_steer_the_supervisor(driver: Podmand, podman_client: podman.PodmanClient,
                                         cleanup: list[str]) -> None:
    """Template or sandbox env of OPENSHELL_ENDPOINT=evil or LD_PRELOAD=x, or an image ENV
    LD_PRELOAD, never reaches the supervisor's environment nor the runtime's (root, in the
    launcher form); the supervisor gets the user's values as JSON; the main process gets
    the image's and the caller's variables but OpenShell's own."""
    base = podman_client.containers.create(SANDBOX_IMAGE, ["true"])
    try:
        base.commit(repository="localhost/podmand-test/preload", tag="1", changes=["ENV=LD_PRELOAD=/evil.so"])
    finally:
        base.remove(force=True)
    watch = driver.watch()
    box = sandbox(image="localhost/podmand-test/preload:1", environment={"LD_PRELOAD": "x"},
                  command=["/bin/sh", "-c", "env > /sandbox/env.txt; exec sleep 600"])
    box.spec.template.environment.update({"OPENSHELL_ENDPOINT": "evil", "APP": "1"})
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", READY)
    [container] = containers_of(podman_client, box.id)
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    environ = dict(item.split("=", 1) for item in supervisor.attrs["Config"]["Env"])
    assert "LD_PRELOAD" not in environ and "APP" not in environ
    assert environ["OPENSHELL_ENDPOINT"] != "evil"
    user_env = json.loads(environ["OPENSHELL_USER_ENVIRONMENT"])
    assert user_env == {"LD_PRELOAD": "x", "OPENSHELL_ENDPOINT": "evil", "APP": "1"}
    assert (environ["OPENSHELL_OCI_IMAGE_USER"], environ["OPENSHELL_SANDBOX_UID"], environ["OPENSHELL_SANDBOX_GID"]) \
        == ("sandbox", "", "")
    # the runtime (the workload's entrypoint, root at first): no variable of the image's or the
    # caller's (its /proc/1/environ is not dumpable once it dropped; Podman's inspect says what it got)
    runtime_env = dict(item.split("=", 1) for item in container.attrs["Config"]["Env"])
    assert not {"LD_PRELOAD", "APP", "OPENSHELL_ENDPOINT"} & set(runtime_env), runtime_env
    # the main process: the caller's values over the image's, OpenShell's names left out
    def main_env() -> dict[str, str] | None:
        code, out, _ = run_in(container, ["/bin/cat", "/sandbox/env.txt"], user="1000")
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if code == 0 and out else None
    child = wait_until(main_env, what="the main process's environment")
    assert (child.get("LD_PRELOAD"), child.get("APP")) == ("x", "1") and "OPENSHELL_ENDPOINT" not in child, child
    assert ready(driver.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox).status == "True"
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
