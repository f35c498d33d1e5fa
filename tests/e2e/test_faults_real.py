"""Faults on real rootless Podman through the pex (issue 9, item 7): podmand
killed (-9) at random points of creates, Podman's API restarted mid-create,
same-id create races, Delete racing Create and Stop racing Start.  Every
sandbox must end Ready or with a terminal reason, and nothing may be left
behind once every sandbox is deleted.
"""

from __future__ import annotations

import random
import re
import signal
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import podman
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch

from .conftest import (
    Podmand,
    Watch,
    containers_of,
    pair_of,
    ready,
    restart_rootless_podman,
    sandbox,
    volumes_of,
    wait_until,
)

OWNED = {"label": "io.podmand.owner=podmand"}


def settled(d: Podmand, sandbox_id: str) -> pb.DriverCondition | None:
    """Ready's condition once it is Ready=True or terminal (not a transient reason)."""
    try:
        cond = ready(d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sandbox_id), timeout=10).sandbox)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return None  # Podman coming back
        raise
    if cond is None or (cond.status != "True" and cond.reason.lower() in names.TRANSIENT_REASONS):
        return None
    return cond


def condition(d: Podmand, sandbox_id: str) -> str:
    """Ready as GetSandbox says it now, and the sandbox's lines in podmand's log (a test's detail)."""
    try:
        cond = ready(d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sandbox_id), timeout=10).sandbox)
    except grpc.RpcError as exc:
        return f"GetSandbox: {exc.code()}"
    lines = [line for line in d.logs().splitlines() if sandbox_id in line and "rpc=GetSandbox" not in line]
    return f"{cond}; podmand: {lines[-8:]}"


def pair_story(client: podman.PodmanClient, d: Podmand, sandbox_id: str) -> dict[str, Any]:
    """What a test's failure needs to say of a sandbox: Ready, podmand's lines of it, and each
    container of its pair with its state and its output's last lines."""
    story: dict[str, Any] = {"ready": condition(d, sandbox_id)}
    for container in pair_of(client, sandbox_id):
        state = container.attrs.get("State", {})
        tail = b"".join(container.logs(stdout=True, stderr=True, tail=6)).decode(errors="replace")
        story[container.name] = f"{state.get('Status')} exit {state.get('ExitCode')}: {tail[-600:]}"
    return story


def reached(watch: Watch, sandbox_id: str, point: str) -> bool:
    """The sandbox passed ``point``: a platform event or a Ready reason of that name."""
    return any(e.reason == point for e in watch.platform_events(sandbox_id)) or any(
        ready(s).reason == point for s in watch.snapshots(sandbox_id))


def leftovers(client: podman.PodmanClient, d: Podmand, before: dict[str, set[str]]) -> dict[str, list[str]]:
    """Everything podmand owns now and did not before, plus its state files."""
    root = d.state_dir / "sandboxes"
    now = {
        "containers": {c.name for c in client.containers.list(all=True, filters=OWNED)},
        "volumes": {v.name for v in client.volumes.list(filters=OWNED)},
    }
    out = {k: sorted(now[k] - before[k]) for k in now}
    out["state files"] = sorted(p.name for p in root.iterdir()) if root.exists() else []
    return out


def assert_nothing_left(client: podman.PodmanClient, d: Podmand, before: dict[str, set[str]]) -> None:
    empty = {"containers": [], "volumes": [], "state files": []}
    wait_until(lambda: leftovers(client, d, before) == empty, 15,
               "nothing left behind", detail=lambda: leftovers(client, d, before))


def owned_now(client: podman.PodmanClient) -> dict[str, set[str]]:
    return {
        "containers": {c.name for c in client.containers.list(all=True, filters=OWNED)},
        "volumes": {v.name for v in client.volumes.list(filters=OWNED)},
    }


def delete_all(d: Podmand, ids: list[str]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: d.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=i), timeout=60), ids))


# ---------------------------------------------------------------- kill -9 at random points


def test_kill9_at_random_points_of_creates_then_restart(make_podmand: Callable[..., Podmand],
                                                        podman_client: podman.PodmanClient,
                                                        cleanup: list[str]) -> None:
    """Four rounds of four creates, each cut by SIGKILL at a point picked at random
    (once each, in random order, with jitter): right after the creates were
    acknowledged, after a sandbox's image was pulled, while its container is being
    created, after it started.  Each restart on the same state directory finishes
    or reports every sandbox."""
    before = owned_now(podman_client)
    rng = random.Random()
    d = make_podmand({"PODMAND_RESYNC_INTERVAL": "1"})
    ids: list[str] = []
    points: list[str] = []
    resumed: list[int] = []
    for point in rng.sample(["acknowledged", "Pulled", "ContainerStarting", "Started"], 4):
        watch = d.watch()
        boxes = [sandbox() for _ in range(4)]
        cleanup.extend(b.id for b in boxes)
        ids.extend(b.id for b in boxes)
        victim = rng.choice(boxes).id
        for box in boxes:
            d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box), timeout=30)
        if point != "acknowledged":
            wait_until(lambda w=watch, v=victim, p=point: reached(w, v, p), 30, f"{victim}: {point}")
        threading.Event().wait(rng.uniform(0, 0.3))  # jitter: the kill point itself, not a wait for state
        points.append(point)
        watch.cancel()
        d.stop(signal.SIGKILL)
        d.log_path.rename(d.log_path.with_name(f"podmand.{len(points)}.log"))  # start() waits for a new ready line
        d.start()
        resumed.append(int((re.search(r"resumed (\d+) create", d.logs()) or ["", "0"])[1]))
    outcomes = {i: wait_until(lambda i=i: settled(d, i), 90, f"{i} to settle", lambda i=i: condition(d, i))
                for i in ids}
    tally: dict[str, int] = {}
    for cond in outcomes.values():
        tally[f"{cond.status}/{cond.reason}"] = tally.get(f"{cond.status}/{cond.reason}", 0) + 1
    print(f"\nkill -9: {len(ids)} creates, kills after {points}, creates resumed per restart {resumed}; "
          f"outcomes {tally}")
    for i, cond in outcomes.items():
        if cond.status == "True":
            [container] = containers_of(podman_client, i)
            assert container.status == "running"
    failed = {i: pair_story(podman_client, d, i) for i, c in outcomes.items() if c.status != "True"}
    assert not failed, (tally, failed)  # nothing is lost to a kill
    delete_all(d, ids)
    assert_nothing_left(podman_client, d, before)


# ---------------------------------------------------------------- Podman restarted mid-create


def test_podman_restart_mid_create(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient,
                                   cleanup: list[str]) -> None:
    """Podman's API service restarting while creates are in flight: open streams end
    UNAVAILABLE, and every create finishes (adopting its own half-made container) or
    fails with a terminal reason, never stuck transient; nothing is left after delete
    (image readers whose removal Podman did not answer are collected at the next resync)."""
    before = owned_now(podman_client)
    driver = make_podmand({"PODMAND_RESYNC_INTERVAL": "1"})
    watch = driver.watch()
    boxes = [sandbox() for _ in range(4)]
    cleanup.extend(b.id for b in boxes)
    for box in boxes:
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box), timeout=30)
    watch.wait_reason(boxes[0].id, "ContainerStarting")
    restart_rootless_podman()
    assert watch.done.wait(30), "stream still open after Podman restarted"
    assert watch.error is not None and watch.error.code() == grpc.StatusCode.UNAVAILABLE
    outcomes = {b.id: wait_until(lambda i=b.id: settled(driver, i), 90, f"{b.id} to settle") for b in boxes}
    print(f"\npodman restart mid-create: {[(c.status, c.reason) for c in outcomes.values()]}")
    for i, cond in outcomes.items():
        assert len(containers_of(podman_client, i)) <= 1
        if cond.status == "True":
            assert containers_of(podman_client, i)[0].status == "running"
        else:
            assert cond.message, cond  # a failure says why
    delete_all(driver, [b.id for b in boxes])
    assert_nothing_left(podman_client, driver, before)


# ---------------------------------------------------------------- races


def race(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls at the same moment; each result or its gRPC status code."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        barrier.wait()
        try:
            return call()
        except grpc.RpcError as exc:
            return exc.code()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def test_same_id_create_race_makes_one_container(driver: Podmand, podman_client: podman.PodmanClient,
                                                 cleanup: list[str]) -> None:
    """Eight identical creates and four with another spec, all at once, for one id:
    identical ones all succeed with one runtime identity, the others ALREADY_EXISTS
    (or they won, and the identical ones lost), and exactly one container runs."""
    box = sandbox()
    other = sandbox(box.id, command=["sleep", "700"])
    cleanup.append(box.id)
    stub = driver.stub
    results = race([lambda: stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box), timeout=30)] * 8
                   + [lambda: stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=other), timeout=30)] * 4)
    won = [r.runtime_identity for r in results if isinstance(r, pb.CreateSandboxResponse)]
    refused = [r for r in results if not isinstance(r, pb.CreateSandboxResponse)]
    assert len(set(won)) == 1 and len(won) in (8, 4), results
    assert refused == [grpc.StatusCode.ALREADY_EXISTS] * (12 - len(won))
    assert wait_until(lambda: settled(driver, box.id), 60, "the sandbox to settle").status == "True"
    assert len(containers_of(podman_client, box.id)) == 1 and len(pair_of(podman_client, box.id)) == 2
    assert len(volumes_of(podman_client, box.id)) == 2  # the workspace's and the channel's
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id), timeout=60).deleted


def test_delete_racing_create_ends_consistent(driver: Podmand, podman_client: podman.PodmanClient,
                                              cleanup: list[str]) -> None:
    """Create and Delete of one id at once, five times: either the delete came first and
    the sandbox runs, or it came second and nothing of it is left, with Deleted sent."""
    watch: Watch = driver.watch()
    stub = driver.stub
    rng = random.Random()
    endings = []
    for _ in range(6):
        box = sandbox()
        cleanup.append(box.id)
        jitter = rng.uniform(0, 0.1)  # which one wins is random; both orders must end consistent

        def delete(b: pb.DriverSandbox = box, delay: float = jitter) -> pb.DeleteSandboxResponse:
            threading.Event().wait(delay)
            return stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=b.id), timeout=60)

        created, deleted = race([lambda b=box: stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=b), timeout=30),
                                 delete])
        assert isinstance(created, pb.CreateSandboxResponse), created
        assert isinstance(deleted, pb.DeleteSandboxResponse), deleted
        if deleted.deleted:
            wait_until(lambda b=box: watch.deleted(b.id), 30, "Deleted")
            err = None
            try:
                stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id), timeout=10)
            except grpc.RpcError as exc:
                err = exc.code()
            assert err == grpc.StatusCode.NOT_FOUND
            assert pair_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []
            assert not (driver.state_dir / "sandboxes" / box.id).exists()
            endings.append("deleted")
        else:
            assert wait_until(lambda b=box: settled(driver, b.id), 60, "settle").status == "True"
            assert stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id), timeout=60).deleted
            endings.append("created after the delete")
    watch.cancel()
    print(f"\ndelete racing create: {endings}")


def test_stop_racing_start_ends_consistent(driver: Podmand, podman_client: podman.PodmanClient,
                                           cleanup: list[str]) -> None:
    """Stop and Start of one sandbox at once, four times: what GetSandbox says afterwards
    is what Podman shows (stopped: exited and Suspended; started: running and Ready)."""
    box = sandbox()
    cleanup.append(box.id)
    stub = driver.stub
    stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box), timeout=30)
    assert wait_until(lambda: settled(driver, box.id), 60, "Ready").status == "True"
    endings = []
    for _ in range(4):
        race([lambda: stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=box.id), timeout=60),
              lambda: stub.StartSandbox(pb.StartSandboxRequest(
                  sandbox_id=box.id, launch_authentication=Launch(sandbox_id=box.id).bundle()), timeout=60)])
        cond = wait_until(lambda: settled(driver, box.id), 60, "settle")
        status = containers_of(podman_client, box.id)[0].status
        assert (cond.status, cond.reason, status) in (("True", "ContainerRunning", "running"),
                                                      ("False", "ContainerStopped", "exited")), (cond, status)
        # the supervisor with its workload: no workload runs without it, none is left running alone
        supervisor = containers_of(podman_client, box.id, "supervisor")[0].status
        assert supervisor == status or (status, supervisor) == ("exited", "created"), (status, supervisor)
        endings.append(cond.reason)
    print(f"\nstop racing start: {endings}")
    assert stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id), timeout=60).deleted


# ---------------------------------------------------------------- the state directory unwritable

@pytest.mark.parametrize("how", ["chmod", "read-only mount"])
def test_state_dir_unwritable_while_serving(driver: Podmand, podman_client: podman.PodmanClient,
                                            cleanup: list[str], how: str) -> None:
    """The state directory made unwritable under a serving podmand, as on a host: its
    permissions taken from the rootless user, or its filesystem read-only (a bind mount
    here; errors=remount-ro on a real disk). CreateSandbox answers FAILED_PRECONDITION
    naming the directory, the OS's reason and the fix, logs one line without a traceback,
    and leaves nothing in Podman or on disk; once writable again, the same create works."""
    state, files = driver.state_dir, driver.state_dir / "sandboxes"
    before = owned_now(podman_client)
    box = sandbox()
    cleanup.append(box.id)
    modes = {p: p.stat().st_mode & 0o7777 for p in (state, files)}
    if how == "chmod":
        for p in modes:
            p.chmod(0o500)
        reason, fix = "Permission denied", "make it writable again for podmand, the user podmand runs as"
    else:
        subprocess.run(["mount", "--bind", "-o", "ro", str(state), str(state)], check=True)
        reason, fix = "Read-only file system", "remount its filesystem read-write"
    try:
        with pytest.raises(grpc.RpcError) as refused:
            driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box), timeout=60)
    finally:
        if how == "chmod":
            for p, mode in modes.items():
                p.chmod(mode)
        else:
            subprocess.run(["umount", str(state)], check=True)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value
    message = refused.value.details()
    assert message.startswith(f"state directory {state} is not writable: {reason} ({files}"), message
    assert message.endswith(f"; {fix}, then try again"), message
    line = f"rpc=CreateSandbox sandbox={box.id} code=FAILED_PRECONDITION"
    wait_until(lambda: line in driver.logs(), 10, "the RPC log line")
    assert [x for x in driver.logs().splitlines() if "is not writable" in x] == [
        next(x for x in driver.logs().splitlines() if line in x)]
    assert "Traceback" not in driver.logs()
    assert pair_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []
    assert_nothing_left(podman_client, driver, before)

    watch = driver.watch()
    try:
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box), timeout=60)
        watch.wait_reason(box.id, "ContainerRunning", 120)
    finally:
        watch.cancel()
    [running] = containers_of(podman_client, box.id)
    assert running.status == "running"
    driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id), timeout=60)
    assert_nothing_left(podman_client, driver, before)
