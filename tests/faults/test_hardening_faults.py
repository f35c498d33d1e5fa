"""Issue 9's fault findings against ``podmand serve`` and a libpod that misbehaves
on cue: a pair's create Podman made but whose answer was lost made whole, a create
killed between making the pair and starting it finished after a restart, Podman's
"no such ..." 500s on delete, one unreadable event, and a consumer that never reads;
and issue 23's netavark teardown 500 on delete (retried, then UNAVAILABLE).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand.host import eventproof
from tests.fakes.harness import Containers
from tests.fakes.libpod import FakeLibpod, Hang, Request
from tests.faults import test_faults as base
from tests.faults.test_faults import DEADLINE, VOLUMES, Podmand, ready, rpc_error, sandbox, wait_until
from tests.faults.test_watch_faults import CID, LABELS, NAME, Container

# The fault suite's fixtures, shared (pytest finds fixtures by module attribute).
launch = base.launch
Reply = tuple[int, dict[str, str], Any]
WORKLOAD = names.container_name("ws", "box", "sb1")  # the names podmand gives sandbox() "sb1"'s pair
SUPERVISOR = names.supervisor_name("sb1")
WORKSPACE, CHANNEL = names.volume_name("sb1"), names.channel_volume_name("sb1")


def made(fake: FakeLibpod, name: str) -> int:
    """How many container creates podmand asked for under ``name``."""
    return sum(1 for call, body in list(fake.bodies)
               if call.endswith("/containers/create") and json.loads(body).get("name") == name)


def stall_starts(fake: FakeLibpod, start: Callable[[Request], Reply]) -> tuple[threading.Event, list[bool]]:
    """Container starts held (never answered) while the flag is set; the event says one arrived."""
    entered, holding = threading.Event(), [True]

    def held(req: Request) -> Reply | Hang:
        if holding[0]:
            entered.set()
            return Hang()
        return start(req)

    fake.route("POST", "/containers/[^/]+/start", held)
    return entered, holding


def wait_ready(d: Podmand, sandbox_id: str) -> pb.DriverSandbox:
    def check() -> pb.DriverSandbox | None:
        got = d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sandbox_id), timeout=5).sandbox
        cond = ready(got)
        assert cond.reason not in ("ContainerNameConflict", "ContainerCreateFailed", "ProvisioningFailed"), cond
        return got if cond.status == "True" else None

    return wait_until(check, f"{sandbox_id} Ready")


def running_pair(pods: Containers, sandbox_id: str) -> tuple[str, str]:
    """The IDs of ``sandbox_id``'s workload and supervisor, both running (one of each)."""
    workload, supervisor = pods.of(sandbox_id), pods.of(sandbox_id, names.ROLE_SUPERVISOR)
    assert [pods.boxes[c]["State"]["Status"] for c in (workload, supervisor)] == ["running", "running"]
    return workload, supervisor


# ---------------------------------------------------------------- finding 3: interrupted create made whole


def test_create_interrupted_by_podman_is_made_whole_on_the_next_attempt(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Podman restarting mid-create made the workload but lost the answer; the client's
    retry gets 500 "name already in use" (4.3.1 never says 409). The next attempt finds
    the workload under its name bearing this create's instance, removes it (a pair is
    made whole or not at all: podmand/driver/pairs.py) and makes the pair again."""
    pods = Containers(fake)  # each sandbox a pair (tests/fakes/harness.py)
    create, cut = pods.create, []

    def lose_the_answer(req: Request) -> Reply:
        answer = create(req)
        if req.json()["name"] == WORKLOAD and not cut:
            cut.append(answer[2]["Id"])
            raise ConnectionResetError("Podman restarted")  # the fake drops the connection
        return answer

    fake.route("POST", "/containers/create", lose_the_answer)
    d = launch().wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    got = wait_ready(d, "sb1")
    assert ready(got).reason == "ContainerRunning"
    workload, _ = running_pair(pods, "sb1")
    assert cut and fake.count(f"DELETE .*/containers/{WORKLOAD}") == 1  # the lost one, removed by name
    assert made(fake, WORKLOAD) == 3 and made(fake, SUPERVISOR) == 1  # lost, refused, made
    assert got.status.instance_id == workload[:12]
    assert f"removing {WORKLOAD}, left by an interrupted create" in d.log


def test_name_held_by_a_foreign_container_is_a_clear_conflict(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Only this create's own leftovers (its instance label) are removed: someone else's
    container holding the workload's name is a terminal ContainerNameConflict, left alone."""
    pods = Containers(fake)  # each sandbox a pair (tests/fakes/harness.py)
    foreign = pods.add("sb1", "created")
    pods.boxes[foreign].update(Name=WORKLOAD, Config={"Labels": {"owner": "someone-else"}})
    d = launch().wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)

    def failed() -> pb.DriverCondition | None:
        cond = ready(d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sb1"), timeout=5).sandbox)
        return cond if cond.reason not in ("Starting", "ContainerStarting") else None

    cond = wait_until(failed, "the conflict to be reported")
    assert (cond.status, cond.reason) == ("False", "ContainerNameConflict"), cond
    assert list(pods.boxes) == [foreign] and pods.boxes[foreign]["State"]["Status"] == "created"
    assert fake.count(r"POST .*/containers/[^/]+/start") == 0
    assert fake.count(r"DELETE .*/containers/") == fake.count(r"DELETE .*/containers/podmand-")  # readers only


# ---------------------------------------------------------------- finding 2: kill -9 between create and start


def test_killed_between_create_and_start_is_made_and_started_after_restart(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """podmand dies after Podman made the pair and before it started: the next podmand on
    the same state directory resumes that create (its launch bundle is still recorded),
    removes the half-started pair and makes and starts it whole."""
    pods = Containers(fake)  # each sandbox a pair (tests/fakes/harness.py)
    entered, holding = stall_starts(fake, pods.start)
    first = launch().wait_ready()
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    wait_until(entered.is_set, "the workload's start")
    assert len(pods.boxes) == 2 and (first.state / "sandboxes" / "sb1" / "launch.json").exists()
    first.stop()  # SIGKILL
    holding[0] = False

    second = launch().wait_ready()
    assert "resumed 1 create(s)" in second.log
    got = wait_ready(second, "sb1")
    workload, _ = running_pair(pods, "sb1")
    assert got.status.instance_id == workload[:12]
    assert made(fake, WORKLOAD) == made(fake, SUPERVISOR) == 2
    assert fake.count(f"DELETE .*/containers/({WORKLOAD}|{SUPERVISOR})") == 2  # the first pair, removed
    assert not (second.state / "sandboxes" / "sb1" / "launch.json").exists()  # auth.json is the only copy


def test_created_pair_stopped_by_the_gateway_is_left_stopped(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """A stop marker means StopSandbox asked for it: a restart does not start the pair."""
    pods = Containers(fake)  # each sandbox a pair (tests/fakes/harness.py)
    entered, holding = stall_starts(fake, pods.start)
    first = launch().wait_ready()
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    wait_until(entered.is_set, "the workload's start")
    first.stop()
    (first.state / "sandboxes" / "sb1" / "stopped").write_text(pods.of("sb1"))  # as StopSandbox records it
    holding[0] = False

    second = launch().wait_ready()
    assert "resumed" not in second.log
    starts = fake.count(r"POST .*/containers/[^/]+/start")
    second.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=5)
    assert fake.count(r"POST .*/containers/[^/]+/start") == starts
    assert sorted(box["State"]["Status"] for box in pods.boxes.values()) == ["created", "created"]
    assert made(fake, WORKLOAD) == made(fake, SUPERVISOR) == 1


# ---------------------------------------------------------------- finding 7: "no such ..." on delete


def running_sandbox(fake: FakeLibpod) -> Containers:
    """sb1's pair, running as an earlier podmand left it, with its channel and workspace
    volumes; the workload's ID is Podman's kind (hex: Podman's messages quote it)."""
    pods = Containers(fake)
    box = pods.boxes.pop(pods.add_pair("sb1", workspace="ws"))
    pods.boxes[CID] = {**box, "Id": CID}
    for volume in (WORKSPACE, CHANNEL):
        fake.volumes[volume] = {"Name": volume, "Labels": {names.OWNER: names.OWNER_VALUE, names.SANDBOX_ID: "sb1"}}
    return pods


def test_delete_treats_no_such_volume_and_container_500s_as_gone(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Under load Podman answers 500 "no such container"/"no such volume" for what just
    went away, for either container of the pair and either volume: DeleteSandbox succeeds,
    each is asked once, and Deleted still reaches the watch."""
    pods = running_sandbox(fake)
    workload, remove = pods.of("sb1"), pods.remove

    def vanished_container(req: Request) -> Reply:
        remove(req)  # Podman removed it and then lost it: "no such container"
        ref = req.path.rsplit("/", 1)[-1]
        return 500, {}, {"cause": "no such container", "message": f"no container with ID {ref} found: "
                         "no such container", "response": 500}

    def vanished_volume(req: Request) -> Reply:
        name = req.path.rsplit("/", 1)[-1]
        fake.volumes.pop(name, None)
        return 500, {}, {"cause": "no such volume", "response": 500,
                         "message": f'no volume with name "{name}" found: no such volume'}

    d = launch().wait_ready()
    watch = d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE)
    try:
        assert base.next_sandbox(watch, "sb1").id == "sb1"
        fake.route("DELETE", "/containers/(?!" + eventproof.PREFIX + ")[^/]+", vanished_container)
        fake.route("DELETE", "/volumes/[^/]+", vanished_volume)
        assert d.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id="sb1"), timeout=5).deleted
        deleted = next(e for e in watch if e.WhichOneof("payload") == "deleted")
        assert deleted.deleted.sandbox_id == "sb1"
    finally:
        watch.cancel()
    assert not pods.boxes and not fake.volumes
    assert fake.count(f"DELETE .*/containers/{SUPERVISOR}") == 1
    assert fake.count(f"DELETE .*/containers/{workload}") == 1
    for volume in (CHANNEL, WORKSPACE):
        assert fake.count(f"DELETE {VOLUMES}/{volume}") == 1
    assert "code=INTERNAL" not in d.log


# ---------------------------------------------------------------- finding 4: one unreadable event


def event(action: str, attributes: dict[str, str]) -> dict[str, Any]:
    """Podman's event of the container: its labels and, as Podman adds it, its name."""
    return {"status": action, "id": CID, "Type": "container", "Action": action,
            "Actor": {"ID": CID, "Attributes": {**attributes, "name": NAME}}, "timeNano": time.time_ns()}


def test_unreadable_events_are_skipped_and_every_stream_stays(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """A 5 MB event line (a tenant's huge label, over the 4 MiB line limit) and an
    undecodable one are skipped with one warning naming the container; the streams and
    the subscription stay, and the change they announced still arrives (by resync)."""
    box = Container()
    box.install(fake, lambda _req: Hang())
    d = launch(PODMAND_RESYNC_INTERVAL="0").wait_ready()
    watches = [d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE) for _ in range(2)]
    try:
        for w in watches:
            assert ready(base.next_sandbox(w, "sb1")).reason == "ContainerRunning"
        fake.call(lambda: box.exit(3))
        fake.events.send(event("died", {**LABELS, "huge": "<" * (5 * 1024 * 1024)}))
        for w in watches:
            assert ready(base.next_sandbox(w, "sb1")).reason == "ContainerExited"
        fake.call(lambda: box.exit(4))
        fake.events.send(b'{"Type":"container","Action":"died","Actor":{"ID":"' + CID.encode() + b'","Attri')
        for w in watches:
            cond = ready(base.next_sandbox(w, "sb1"))
            assert cond.reason == "ContainerExited" and "4" in cond.message
    finally:
        for w in watches:
            w.cancel()
    assert fake.count(r"GET .*/events") == 1  # never resubscribed
    assert "lost Podman's event stream" not in d.log
    warnings = [line for line in d.lines if "skipped an unreadable Podman event" in line]
    assert len(warnings) == 1 and CID in warnings[0], warnings


# ---------------------------------------------------------------- slow consumer


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]


def test_never_reading_stream_is_ended_alone_and_memory_stays_bounded(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """A watcher that never reads is ended RESOURCE_EXHAUSTED once it is a buffer behind;
    a reading watcher sees every change promptly, and podmand's memory does not follow
    the flood."""
    box = Container()
    box.install(fake, lambda _req: Hang())
    d = launch(PODMAND_RESYNC_INTERVAL="0", PODMAND_WATCH_BUFFER="64").wait_ready()
    # A client that buffers little: backpressure reaches podmand after a few KiB.
    stalled_channel = grpc.insecure_channel(f"unix://{d.socket}", options=[("grpc.http2.lookahead_bytes", 1024),
                                                                           ("grpc.http2.bdp_probe", 0)])
    stalled = pb_grpc.ComputeDriverStub(stalled_channel).WatchSandboxes(pb.WatchSandboxesRequest(),
                                                                        timeout=DEADLINE)
    live = d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE)
    seen: list[pb.WatchSandboxesEvent] = []
    reader = threading.Thread(target=lambda: seen.extend(_drain(live)), daemon=True)
    try:
        stalled.initial_metadata()
        assert ready(base.next_sandbox(live, "sb1")).reason == "ContainerRunning"
        reader.start()
        before = rss_kib(d.proc.pid)
        floods = 2000
        for code in range(1, floods + 1):
            fake.call(lambda code=code: box.exit(code))  # type: ignore[misc]
            fake.events.send(event("died", LABELS))
        wait_until(lambda: any(f"exited with code {floods}" in ready(s.sandbox.sandbox).message or
                               f"code {floods}" in ready(s.sandbox.sandbox).message
                               for s in list(seen) if s.WhichOneof("payload") == "sandbox"),
                   "the reading watcher to see the last change")
        after = rss_kib(d.proc.pid)
        codes = []
        err = rpc_error(lambda: codes.extend(_drain(stalled, raising=True)))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
        assert len(codes) < floods  # it was cut off, not fed everything
    finally:
        live.cancel()
        stalled.cancel()
        stalled_channel.close()
    print(f"\nslow consumer: podmand RSS {before} KiB before, {after} KiB after {floods} changes "
          f"(+{after - before} KiB); the stalled stream got {len(codes)} events before RESOURCE_EXHAUSTED")
    assert after - before < 30 * 1024
    # The client hears the status before the server's RPC line is written: wait for the line.
    wait_until(lambda: "rpc=WatchSandboxes ended code=RESOURCE_EXHAUSTED" in d.log, "the RPC log line")
    assert d.log.count("code=RESOURCE_EXHAUSTED") == 1  # the reading stream was never cut


def _drain(call: Iterator[pb.WatchSandboxesEvent], *, raising: bool = False) -> Iterator[pb.WatchSandboxesEvent]:
    try:
        yield from call
    except grpc.RpcError as exc:
        if raising:
            raise
        if exc.code() != grpc.StatusCode.CANCELLED:
            raise


# ---------------------------------------------------------------- issue 23: netavark's teardown 500 on delete


def test_delete_podman_fails_in_netavark_is_retried_then_unavailable_never_internal(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Rootless Podman 5.4.2 answers a removal whose network teardown netavark failed with
    500 (tests/unit/driver/test_teardown.py has the wording's sources). The workload's
    removal failing on every attempt: DeleteSandbox is UNAVAILABLE, one line naming the
    sandbox and quoting Podman, and the RPC's log line says so without a traceback;
    neither volume is touched. Once Podman removes it (404 on the next ask, as 5.4.2
    does), the next delete finishes and Deleted reaches the watch."""
    pods = running_sandbox(fake)
    cid = pods.of("sb1")
    cause = "netavark: failed to delete container veth eth0: Netlink error: No such device (os error 19)"
    message = f"cleaning up container {cid}: removing container {cid} network: {cause}"
    failing = [True]

    def remove(req: Request) -> Reply:
        if failing[0]:
            return 500, {}, {"cause": cause, "message": message, "response": 500}
        pods.boxes.pop(cid, None)
        return 404, {}, {"cause": "no such container", "response": 404,
                         "message": f"no container with name or ID {cid!r} found: no such container"}

    d = launch().wait_ready()
    watch = d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE)
    try:
        assert base.next_sandbox(watch, "sb1").id == "sb1"
        fake.route("DELETE", f"/containers/{cid}", remove)
        err = rpc_error(lambda: d.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id="sb1"), timeout=10))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert err.details() == ("sandbox sb1: removing its container failed 3 times in Podman's network teardown "
                                 f"(netavark); try again: {message}")
        assert fake.count(f"DELETE .*/containers/{cid}") == 3
        assert fake.count(f"DELETE .*/containers/{SUPERVISOR}") == 1 and list(pods.boxes) == [cid]
        assert fake.count(f"DELETE {VOLUMES}/") == 0 and {WORKSPACE, CHANNEL} <= set(fake.volumes)
        failing[0] = False
        assert d.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id="sb1"), timeout=10).deleted
        deleted = next(e for e in watch if e.WhichOneof("payload") == "deleted")
        assert deleted.deleted.sandbox_id == "sb1" and not fake.volumes and not pods.boxes
    finally:
        watch.cancel()
    assert "code=INTERNAL" not in d.log and "Traceback" not in d.log
    [line] = [x for x in d.lines if "rpc=DeleteSandbox" in x and "code=UNAVAILABLE" in x]
    assert "netavark" in line and line.count("\n") <= 1
