"""What podmand builds, run under the strict stand-in supervisor (tests/images/supervisor):
identity as the stock supervisor's OCI mode, the caller's environment, TCP policies, prompt
stops, token sources, new generations on a running sandbox, validation that allocates
nothing, and what a restarted podmand reports instead of provisioning again."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from tests.jwt import make_launch
from tests.wait import wait_until

from .conftest import Podmand, containers_of, gateway_metadata, ready, run_in, sandbox

DEADLINE_SNAP = 60.0

IMAGES = "localhost/podmand-test"
# The main process reports who it runs as and what it sees, then idles. (The supervisor
# keeps the main process's output from the container log, so the report is a file.)
REPORT = ["sh", "-c", '{ echo "ID=$(id -u):$(id -g):$(id -G)"; env | sed "s/^/ENV /"; } >/tmp/.r; '
          'mv /tmp/.r /tmp/report; exec sleep 600']


def logs(podman_client: podman.PodmanClient, sandbox_id: str) -> str:
    [container] = containers_of(podman_client, sandbox_id)
    return b"".join(container.logs(stdout=True, stderr=True)).decode(errors="replace")


def reported(podman_client: podman.PodmanClient, sandbox_id: str) -> str:
    """The main process's report, once written."""
    [container] = containers_of(podman_client, sandbox_id)

    def check() -> str:
        container.reload()
        assert container.status == "running", logs(podman_client, sandbox_id)
        code, out, _ = run_in(container, ["cat", "/tmp/report"])
        return out if code == 0 else ""

    result: str = wait_until(check, 30, f"{sandbox_id} main process report", lambda: logs(podman_client, sandbox_id))
    return result


def main_env(text: str) -> dict[str, str]:
    return dict(line[4:].split("=", 1) for line in text.splitlines() if line.startswith("ENV ") and "=" in line)


def refused(driver: Podmand, box: pb.DriverSandbox) -> str:
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=box))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as err:
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return err.value.details() or ""


def policy(user: str, group: str = "") -> dict[str, Any]:
    """A policy naming a user (and group): the gateway passes them to podmand as workload_identity
    and to the supervisor in the policy (the stand-in reads the policy from test knobs)."""
    env = {"STANDIN_POLICY_RUN_AS_USER": user, **({"STANDIN_POLICY_RUN_AS_GROUP": group} if group else {})}
    return {"workload_identity": pb.WorkloadIdentityRequest(user=user, group=group), "environment": env}


@pytest.mark.parametrize(("image", "extra", "expected"), [
    # upstream's default image ends with USER sandbox; the test image's sandbox is also in group extra (1001)
    ("sandbox:1", {}, ("1000:1000:1000 1001", (1000, 1000, [1000, 1001], "image"))),
    # without USER the policy must name the user and the group
    ("sandbox-nouser:1", policy("sandbox", "sandbox"), ("1000:1000:1000 1001", (1000, 1000, [1000, 1001], "policy"))),
    # numeric users get no supplementary groups; 2345 needs a namespace larger than the default 1024 ids
    ("sandbox-uid:1", {"userns": "auto:size=4096"}, ("2345:2346:2346", (2345, 2346, [], "image"))),
])
def test_identity_matrix_runs(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                              cleanup: list[str], image: str, extra: dict[str, Any],
                              expected: tuple[str, tuple[int, int, list[int], str]]) -> None:
    """Each image runs its main process as the identity the supervisor selects, and
    status.resolved_identity says exactly that."""
    extra = dict(extra)
    userns = extra.pop("userns", "auto")
    driver = make_podmand({"OPENSHELL_PODMAN_USERNS": userns, "PODMAND_ALLOW_USERNS_OWN_UID": "true"})
    watch = driver.watch()
    box = sandbox(image=f"{IMAGES}/{image}", command=REPORT, token=True, **extra)
    cleanup.append(box.id)
    driver.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=box))
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "ContainerRunning")
    ids, identity = expected
    assert f"ID={ids}" in reported(podman_client, box.id)
    # the supervisor's OCI mode, never the numeric (Kubernetes) one
    assert f"identity mode=oci uid={identity[0]} gid={identity[1]}" in logs(podman_client, box.id)
    got = snap.status.resolved_identity
    assert (got.uid, got.gid, list(got.supplementary_gids), got.source) == identity
    assert got.resource_digest == podman_client.images.get(f"{IMAGES}/{image}").id
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


@pytest.mark.parametrize(("image", "extra", "reason"), [
    ("sandbox-nouser:1", {}, "OCI USER is required because run_as_user is omitted"),
    ("sandbox-root:1", {}, "OCI USER 'root' selects root"),
    ("sandbox-uid:1", {}, "uid 2345 cannot exist in the sandbox's user namespace, which maps ids 0-1023"),
    ("sandbox-nouser:1", policy("sandbox"), "OCI USER is required because run_as_user is omitted"),
    ("sandbox:1", policy("ghost"), "unrecognized sandbox identity 'ghost'"),
])
def test_identity_matrix_refusals(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                                  cleanup: list[str], image: str, extra: dict[str, Any], reason: str) -> None:
    """What the supervisor would refuse at start is refused before anything is made, with its reason."""
    driver = make_podmand()
    # warm the account-file cache so that validation can check names too
    warm = sandbox(token=True)
    cleanup.append(warm.id)
    box = sandbox(image=f"{IMAGES}/{image}", token=True, **extra)
    cleanup.append(box.id)
    if "workload_identity" in extra:
        watch = driver.watch()
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=warm))
        watch.wait_reason(warm.id, "ContainerRunning")
    details = refused(driver, box)
    assert reason in details and box.spec.sandbox_token not in details
    assert containers_of(podman_client, box.id) == []
    assert list(podman_client.volumes.list(filters={"label": f"openshell.ai/sandbox-id={box.id}"})) == []


def test_user_environment_reaches_the_main_process_filtered(driver: Podmand, podman_client: podman.PodmanClient,
                                                             cleanup: list[str]) -> None:
    """The caller's variables reach the main process; loader and OpenShell knobs reach neither
    the root supervisor nor the workload; podmand-private names do not exist."""
    watch = driver.watch()
    box = sandbox(command=REPORT, token=True, environment={"APP_MODE": "prod", "LD_PRELOAD": "/x.so"})
    box.spec.template.environment.update({"OPENSHELL_ENDPOINT": "http://evil:1", "TEAM": "blue"})
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    env = main_env(reported(podman_client, box.id))
    assert env["APP_MODE"] == "prod" and env["TEAM"] == "blue"
    assert "LD_PRELOAD" not in env and env["OPENSHELL_ENDPOINT"] != "http://evil:1"
    assert env["OPENSHELL_SANDBOX"] == "1"
    # what the supervisor strips is gone; nothing podmand-private is there
    assert not {"OPENSHELL_SANDBOX_TOKEN_FILE", "OPENSHELL_OCI_IMAGE_USER", "OPENSHELL_K8S_SA_TOKEN_FILE"} & set(env)
    assert not [k for k in env if k.startswith(("OPENSHELL_DRIVER", "OPENSHELL_LAUNCH"))]
    [container] = containers_of(podman_client, box.id)
    supervisor_env = run_in(container, ["cat", "/proc/1/environ"])[1].split("\0")
    assert not [item for item in supervisor_env if item.startswith("LD_PRELOAD=")]
    filtered = [e for e in watch.platform_events(box.id) if e.reason == "EnvironmentFiltered"]
    assert len(filtered) == 1 and "LD_PRELOAD, OPENSHELL_ENDPOINT" in filtered[0].message
    assert "/x.so" not in filtered[0].message
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_tcp_policy_starts(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """A policy with protocol: tcp endpoints needs the runtime's policy-dns-transparent-tcp."""
    watch = driver.watch()
    box = sandbox(command=REPORT, token=True, environment={"STANDIN_POLICY_TCP": "1"})
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    assert "ID=1000:1000" in reported(podman_client, box.id)
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_stop_reaches_the_workload(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                                   cleanup: list[str]) -> None:
    """SIGTERM reaches the workload (another uid) through the supervisor: the container ends
    with the workload's 143, not the 137 of a SIGKILL after the 30 s stop timeout."""
    driver = make_podmand({"OPENSHELL_STOP_TIMEOUT": "30"})
    watch = driver.watch()
    box = sandbox(command=["sleep", "600"], token=True)
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning")
    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id))
    [container] = containers_of(podman_client, box.id)
    assert container.attrs["State"]["ExitCode"] == 143
    assert container.attrs["Config"]["StopSignal"] in (15, "15", "SIGTERM", "TERM")
    snap = watch.wait_reason(box.id, "ContainerStopped")
    assert [c.status for c in snap.status.conditions if c.type == "Suspended"] == ["True"]
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_token_sources(driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """With a gateway token the supervisor reads the token file; without one it exchanges
    podmand's credential (IssueSandboxToken), which AuthenticateSandbox then vouches for."""
    watch = driver.watch()
    with_token, without = sandbox(token=True), sandbox()
    cleanup += [with_token.id, without.id]
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=with_token))
    created = driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=without)).runtime_identity
    for box in (with_token, without):
        watch.wait_reason(box.id, "ContainerRunning")
    assert "token source file /etc/openshell/auth/sandbox.jwt" in logs(podman_client, with_token.id)
    assert "token source k8s-sa /etc/openshell/auth/driver.credential" in logs(podman_client, without.id)
    [container] = containers_of(podman_client, without.id)
    code, credential, _ = run_in(container, ["cat", "/etc/openshell/auth/driver.credential"])  # as the supervisor
    assert code == 0
    answer = driver.stub.AuthenticateSandbox(pb.AuthenticateSandboxRequest(credential=credential.strip()))
    assert (answer.sandbox_id, answer.runtime_identity) == (without.id, created)
    code, _, err = run_in(container, ["cat", "/etc/openshell/auth/driver.credential"], user="1000")
    assert code != 0 and "Permission denied" in err
    [tokened] = containers_of(podman_client, with_token.id)
    assert run_in(tokened, ["test", "-e", "/etc/openshell/auth/driver.credential"])[0] != 0
    for box in (with_token, without):
        assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_new_generation_restarts_a_running_sandbox(driver: Podmand, podman_client: podman.PodmanClient,
                                                  cleanup: list[str]) -> None:
    """StartSandbox with a new generation on a running sandbox applies it (the supervisor reads
    its token once, at start); a retry of the same transition changes nothing."""
    watch = driver.watch()
    box = sandbox(token=True)
    box.spec.launch_authentication = make_launch(box.id, "g0000000000000001")
    cleanup.append(box.id)
    created = driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box)).runtime_identity
    watch.wait_reason(box.id, "ContainerRunning")
    [before] = containers_of(podman_client, box.id)
    bundle = make_launch(box.id, "g0000000000000002")
    started = driver.stub.StartSandbox(pb.StartSandboxRequest(
        sandbox_id=box.id, generation_id="g0000000000000002", launch_authentication=bundle,
        expected_runtime_identity=created)).runtime_identity
    assert started.split("/")[0] == created.split("/")[0] and started.endswith("/g0000000000000002")
    watch.wait_reason(box.id, "ContainerRunning")
    [after] = containers_of(podman_client, box.id)
    assert after.id == before.id and after.attrs["State"]["StartedAt"] != before.attrs["State"]["StartedAt"]
    token = run_in(after, ["cat", "/etc/openshell/auth/sandbox.jwt"])[1].strip()
    assert token == json.loads(bundle)["supervisor"]["gateway_token"]
    again = driver.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id, generation_id="g0000000000000002"))
    assert again.runtime_identity == started
    [same] = containers_of(podman_client, box.id)
    assert same.attrs["State"]["StartedAt"] == after.attrs["State"]["StartedAt"]
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_validation_allocates_nothing(driver: Podmand, podman_client: podman.PodmanClient) -> None:
    """ValidateSandboxCreate creates no container (not even a short-lived image reader)."""
    since = int(time.time()) - 1
    driver.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=sandbox(token=True)))
    until = int(time.time()) + 1
    events = list(podman_client.events(since=since, until=until, decode=True,
                                       filters={"type": "container", "event": "create"}))
    names = [e.get("Actor", {}).get("Attributes", {}).get("name", "") for e in events]
    # Only this daemon's readers (named by its pid): the window may reach into the previous test.
    ours = tuple(f"podmand-read-{pid}-" for pid in driver.pids())
    readers = [n for n in names if n.startswith(ours)]
    assert readers == []
    caps = driver.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    assert caps.supports_sandbox_authentication


def test_restart_reports_instead_of_provisioning_again(make_podmand: Callable[..., Podmand],
                                                       podman_client: podman.PodmanClient,
                                                       cleanup: list[str]) -> None:
    """After a restart, a terminally failed create is reported with its failure and a container
    removed while podmand was down is reported as removed: neither is provisioned again."""
    first = make_podmand()
    watch = first.watch()
    failed = sandbox(image="localhost/podmand-test/no-such-image:1", token=True)
    removed = sandbox(token=True)
    cleanup += [failed.id, removed.id]
    for box in (failed, removed):
        first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(failed.id, "ImagePullFailed", timeout=60)
    watch.wait_reason(removed.id, "ContainerRunning")
    watch.cancel()
    first.stop()
    [container] = containers_of(podman_client, removed.id)
    container.remove(force=True)

    second = make_podmand(start=False)
    second.state_dir, second.env["PODMAND_STATE_DIR"] = first.state_dir, str(first.state_dir)
    second.start()
    for box, reason in ((failed, "ImagePullFailed"), (removed, "ContainerRemoved")):
        cond = ready(second.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox)
        assert cond is not None and (cond.status, cond.reason) == ("False", reason)
    assert "resuming interrupted create" not in second.logs()
    assert containers_of(podman_client, removed.id) == []
    for box in (failed, removed):
        assert second.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_a_restarted_podmand_tells_each_sandbox_right_from_its_first_snapshot(
        make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """A restarted podmand serves a new stream from one list (the looks refine it in the
    background): the first snapshot of a running, an exited (code 3) and a stopped sandbox
    already says what GetSandbox (an inspect) says, fence evidence included."""
    first = make_podmand()
    watch = first.watch()
    # The stop waits for the supervisor to be up (its socket), and the exit comes after the
    # stop: on Podman 5.4.2 (rootless netavark) a stop right after Ready, while another
    # sandbox's container exited, failed in Podman's teardown ("failed to delete container
    # veth eth0: ... No such device"), and its removal was noted failing too. (5.4.2 has
    # stopped or removed the container past that error; podmand now asks again and answers
    # UNAVAILABLE if it persists: podmand/driver/teardown.py.)
    running, stopped = sandbox(token=True), sandbox(token=True)
    exited = sandbox(token=True, command=["sh", "-c", "exit 3"])
    cleanup += [running.id, exited.id, stopped.id]
    for box in (running, stopped):
        first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(running.id, "ContainerRunning")
    watch.wait_reason(stopped.id, "ContainerRunning")
    [container] = containers_of(podman_client, stopped.id)
    wait_until(lambda: run_in(container, ["test", "-S", "/run/openshell/ssh.sock"])[0] == 0, DEADLINE_SNAP,
               "the supervisor's socket")
    first.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=stopped.id))
    watch.wait_reason(stopped.id, "ContainerStopped")
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=exited))
    watch.wait_reason(exited.id, "ContainerExited")
    watch.cancel()
    first.stop()

    second = make_podmand(start=False)
    second.state_dir, second.env["PODMAND_STATE_DIR"] = first.state_dir, str(first.state_dir)
    second.start()
    fresh = second.watch()
    expected = {running.id: ("True", "ContainerRunning"), exited.id: ("False", "ContainerExited"),
                stopped.id: ("False", "ContainerStopped")}
    for sandbox_id, (status, reason) in expected.items():
        got = second.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sandbox_id)).sandbox
        cond = ready(got)
        assert cond is not None and (cond.status, cond.reason) == (status, reason)
        snap = wait_until(lambda sid=sandbox_id: fresh.snapshots(sid), DEADLINE_SNAP, f"a snapshot of {sandbox_id}")[0]
        told = ready(snap)
        assert told is not None and (told.status, told.reason, told.message) == (status, reason, cond.message)
        assert snap.status.fence_evidence == got.status.fence_evidence and got.status.fence_evidence.evidence_digest
    assert "code 3" in (ready(fresh.snapshots(exited.id)[0]) or pb.DriverCondition()).message
    fresh.cancel()
