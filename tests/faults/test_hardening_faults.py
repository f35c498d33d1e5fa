"""Issue 9's fault findings against ``podmand serve`` and a libpod that misbehaves
on cue: interrupted creates adopted whatever status Podman answers, a create
killed between container create and start finished after a restart, Podman's
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
from tests.fakes.libpod import FakeLibpod, Hang, Request
from tests.faults import test_faults as base
from tests.faults.test_faults import DEADLINE, VOLUMES, Podmand, ready, rpc_error, sandbox, wait_until
from tests.faults.test_watch_faults import CID, LABELS, NAME, Container

# The fault suite's fixtures, shared (pytest finds fixtures by module attribute).
launch = base.launch
Reply = tuple[int, dict[str, str], Any]
IN_USE = ('the container name "{name}" is already in use by {cid}. You have to remove that container '
          'to be able to reuse that name: that name is already in use')


class Containers:
    """Podman's containers as one table: create, list (label filters), inspect, start, remove."""

    def __init__(self, fake: FakeLibpod) -> None:
        self.fake = fake
        self.table: dict[str, dict[str, Any]] = {}
        self.creates: list[str] = []
        self.on_create: Callable[[dict[str, Any]], Reply | None] = lambda _spec: None
        self.on_start: Callable[[str], Any] = lambda _cid: None
        fake.route("POST", "/containers/create", self._create)
        fake.route("GET", "/containers/json", self._list)
        fake.route("GET", "/containers/(?P<n>[^/]+)/json", self._inspect)
        fake.route("POST", "/containers/(?P<n>[^/]+)/start", self._start)
        fake.route("POST", "/containers/(?P<n>[^/]+)/wait", lambda _req: Hang())
        fake.route("DELETE", "/containers/(?P<n>[^/]+)", self._remove)

    def sandboxes(self) -> list[dict[str, Any]]:
        return [c for c in self.table.values() if c["labels"].get(names.MANAGED) == "true"]

    def _find(self, ref: str) -> dict[str, Any] | None:
        return next((c for c in self.table.values() if ref in (c["id"], c["name"])), None)

    def _create(self, req: Request) -> Reply:
        spec = req.json()
        self.creates.append(spec["name"])
        special = self.on_create(spec)
        if special is not None:
            return special
        existing = self._find(spec["name"])
        if existing is not None:  # Podman 4.3.1: 500, not 409
            return 500, {}, {"cause": "that name is already in use", "response": 500,
                             "message": IN_USE.format(name=spec["name"], cid=existing["id"])}
        return 201, {}, {"Id": self.add(spec), "Warnings": []}

    def add(self, spec: dict[str, Any]) -> str:
        cid = f"{len(self.table) + 1:02d}" + "ab" * 31
        self.table[cid] = {"id": cid, "name": spec["name"], "labels": spec.get("labels") or {}, "state": "created"}
        return cid

    def _list(self, req: Request) -> Reply:
        wanted = json.loads(req.query.get("filters", "{}")).get("label", [])
        out = []
        for c in self.table.values():
            if all(c["labels"].get(k) == v for k, _, v in (w.partition("=") for w in wanted)):
                out.append({"Id": c["id"], "Names": [c["name"]], "State": c["state"], "Labels": c["labels"],
                            "Created": "2020-01-01T00:00:00Z"})
        return 200, {}, out

    def _inspect(self, req: Request) -> Reply:
        c = self._find(req.path.rsplit("/", 2)[-2])
        if c is None:
            return 404, {}, {"message": "no such container"}
        return 200, {}, {"Id": c["id"], "Name": c["name"], "Created": "2020-01-01T00:00:00Z",
                         "State": {"Status": c["state"], "Running": c["state"] == "running"},
                         "Config": {"Labels": c["labels"]}}

    async def _start(self, req: Request) -> Any:
        c = self._find(req.path.rsplit("/", 2)[-2])
        if c is None:
            return 404, {}, {"message": "no such container"}
        special = self.on_start(c["id"])
        if special is not None:
            return special
        c["state"] = "running"
        return 204, {}, b""

    def _remove(self, req: Request) -> Reply:
        c = self._find(req.path.rsplit("/", 1)[-1])
        if c is None:
            return 404, {}, {"message": "no such container"}
        del self.table[c["id"]]
        return 200, {}, [{"Id": c["id"]}]


def wait_ready(d: Podmand, sandbox_id: str) -> pb.DriverSandbox:
    def check() -> pb.DriverSandbox | None:
        got = d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sandbox_id), timeout=5).sandbox
        cond = ready(got)
        assert cond.reason not in ("ContainerNameConflict", "ContainerCreateFailed", "ProvisioningFailed"), cond
        return got if cond.status == "True" else None

    return wait_until(check, f"{sandbox_id} Ready")


# ---------------------------------------------------------------- finding 3: interrupted create adopted


def test_create_interrupted_by_podman_is_adopted_whatever_the_status(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Podman restarting mid-create made the container but lost the answer; the retry
    gets 500 "name already in use" (4.3.1 never says 409) and adopts its own container."""
    pods = Containers(fake)
    cut = []

    def lose_the_answer(spec: dict[str, Any]) -> Reply | None:
        if spec["name"].startswith("openshell-") and not cut:
            cut.append(pods.add(spec))
            raise ConnectionResetError("Podman restarted")  # the fake drops the connection
        return None

    pods.on_create = lose_the_answer
    d = launch().wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    got = wait_ready(d, "sb1")
    assert ready(got).reason == "ContainerRunning"
    assert [c["id"] for c in pods.sandboxes()] == cut  # the first container, adopted and started
    assert pods.creates.count("openshell-ws--box-sb1") >= 2
    assert "adopting container" in d.log


def test_name_held_by_a_foreign_container_is_a_clear_conflict(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Only our own attempt (labels: same sandbox, spec hash and instance) is adopted:
    someone else's container holding the name is a terminal ContainerNameConflict."""
    pods = Containers(fake)
    pods.add({"name": "openshell-ws--box-sb1", "labels": {"owner": "someone-else"}})
    d = launch().wait_ready()
    d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)

    def failed() -> pb.DriverCondition | None:
        cond = ready(d.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sb1"), timeout=5).sandbox)
        return cond if cond.reason not in ("Starting", "ContainerStarting") else None

    cond = wait_until(failed, "the conflict to be reported")
    assert (cond.status, cond.reason) == ("False", "ContainerNameConflict"), cond
    assert [c["state"] for c in pods.table.values() if c["name"].startswith("openshell-")] == ["created"]
    assert fake.count(r"POST .*/containers/[^/]+/start") == 0


# ---------------------------------------------------------------- finding 2: kill -9 between create and start


def test_killed_between_create_and_start_is_started_after_restart(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """podmand dies after Podman created the container and before it started: the
    next podmand on the same state directory starts that same container."""
    pods = Containers(fake)
    entered = threading.Event()

    def stall(_cid: str) -> Hang:
        entered.set()
        return Hang()

    pods.on_start = stall
    first = launch().wait_ready()
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    wait_until(entered.is_set, "the start request")
    assert (first.state / "sandboxes" / "sb1" / "created").read_text() == pods.sandboxes()[0]["id"]
    first.stop()  # SIGKILL
    pods.on_start = lambda _cid: None

    second = launch().wait_ready()
    assert "resumed 1 create(s)" in second.log
    got = wait_ready(second, "sb1")
    [container] = pods.sandboxes()
    assert container["state"] == "running" and got.status.instance_id == container["id"][:12]
    assert pods.creates.count("openshell-ws--box-sb1") == 2  # the retry found and adopted it


def test_created_container_stopped_by_the_gateway_is_left_stopped(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """A stop marker means StopSandbox asked for it: a restart does not start it."""
    pods = Containers(fake)
    entered = threading.Event()
    pods.on_start = lambda _cid: (entered.set(), Hang())[1]
    first = launch().wait_ready()
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=5)
    wait_until(entered.is_set, "the start request")
    first.stop()
    (first.state / "sandboxes" / "sb1" / "stopped").write_text(pods.sandboxes()[0]["id"])
    pods.on_start = lambda _cid: None

    second = launch().wait_ready()
    assert "resumed" not in second.log
    starts = fake.count(r"POST .*/containers/[^/]+/start")
    second.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=5)
    assert fake.count(r"POST .*/containers/[^/]+/start") == starts
    assert [c["state"] for c in pods.sandboxes()] == ["created"]


# ---------------------------------------------------------------- finding 7: "no such ..." on delete


def test_delete_treats_no_such_volume_and_container_500s_as_gone(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Under load Podman answers 500 "no such volume"/"no such container" for what just
    went away: DeleteSandbox succeeds and Deleted still reaches the watch."""
    box = Container()
    box.install(fake, lambda _req: Hang())
    fake.volumes["openshell-sandbox-sb1-workspace"] = {
        "Name": "openshell-sandbox-sb1-workspace", "Labels": {names.OWNER: names.OWNER_VALUE,
                                                               names.SANDBOX_ID: "sb1"}}

    def vanished_container(req: Request) -> Reply:
        if req.path.rsplit("/", 1)[-1].startswith(eventproof.PREFIX):  # not the sandbox's: podmand's event proof
            return 200, {}, [{"Id": "proof"}]
        box.status = "gone"
        return 500, {}, {"cause": "no such container", "message": f"no container with ID {CID} found: "
                         "no such container", "response": 500}

    def vanished_volume(_req: Request) -> Reply:
        fake.volumes.clear()
        return 500, {}, {"cause": "no such volume", "response": 500,
                         "message": 'no volume with name "openshell-sandbox-sb1-workspace" found: no such volume'}

    fake.route("DELETE", "/containers/[^/]+", vanished_container)
    fake.route("DELETE", "/volumes/[^/]+", vanished_volume)
    d = launch().wait_ready()
    watch = d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE)
    try:
        assert base.next_sandbox(watch, "sb1").id == "sb1"
        assert d.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id="sb1"), timeout=5).deleted
        deleted = next(e for e in watch if e.WhichOneof("payload") == "deleted")
        assert deleted.deleted.sandbox_id == "sb1"
    finally:
        watch.cancel()
    assert fake.count(f"DELETE {VOLUMES}/openshell-sandbox-sb1-workspace") == 1
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
    500 (tests/unit/driver/test_teardown.py has the wording's sources). Failing on every
    attempt: DeleteSandbox is UNAVAILABLE, one line naming the sandbox and quoting Podman,
    and the RPC's log line says so without a traceback; once Podman removes it (404 on the
    next ask, as 5.4.2 does), the next delete finishes and Deleted reaches the watch."""
    box = Container()
    box.install(fake, lambda _req: Hang())
    volume = "openshell-sandbox-sb1-workspace"
    fake.volumes[volume] = {"Name": volume, "Labels": {names.OWNER: names.OWNER_VALUE, names.SANDBOX_ID: "sb1"}}
    cause = "netavark: failed to delete container veth eth0: Netlink error: No such device (os error 19)"
    message = f"cleaning up container {CID}: removing container {CID} network: {cause}"
    failing = [True]

    def remove(req: Request) -> Reply:
        if req.path.rsplit("/", 1)[-1].startswith(eventproof.PREFIX):  # not the sandbox's: podmand's event proof
            return 200, {}, [{"Id": "proof"}]
        if failing[0]:
            return 500, {}, {"cause": cause, "message": message, "response": 500}
        box.status = "gone"
        return 404, {}, {"cause": "no such container", "response": 404,
                         "message": f"no container with name or ID {CID!r} found: no such container"}

    fake.route("DELETE", "/containers/[^/]+", remove)
    d = launch().wait_ready()
    watch = d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE)
    try:
        assert base.next_sandbox(watch, "sb1").id == "sb1"
        err = rpc_error(lambda: d.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id="sb1"), timeout=10))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert err.details() == ("sandbox sb1: removing its container failed 3 times in Podman's network teardown "
                                 f"(netavark); try again: {message}")
        assert fake.count(f"DELETE .*/containers/{CID}") == 3 and volume in fake.volumes
        failing[0] = False
        assert d.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id="sb1"), timeout=10).deleted
        deleted = next(e for e in watch if e.WhichOneof("payload") == "deleted")
        assert deleted.deleted.sandbox_id == "sb1" and volume not in fake.volumes
    finally:
        watch.cancel()
    assert "code=INTERNAL" not in d.log and "Traceback" not in d.log
    [line] = [x for x in d.lines if "rpc=DeleteSandbox" in x and "code=UNAVAILABLE" in x]
    assert "netavark" in line and line.count("\n") <= 1
