"""The watch engine's fault paths: ``podmand serve`` against a fake libpod whose
event stream stays silent, so only the resync safety net or the /wait waiter
can deliver a change, and whose networks and volumes exercise GC ownership.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from tests.fakes.libpod import FakeLibpod, Feed, Hang, Request, Stream
from tests.faults import test_faults as base
from tests.faults.test_faults import DEADLINE, Podmand, ready, wait_until

# The fault suite's fixtures, shared (pytest finds fixtures by module attribute).
launch = base.launch

CID = "c0ffee" + "0" * 58
LABELS = {
    names.MANAGED: "true",
    names.OWNER: names.OWNER_VALUE,
    names.SANDBOX_ID: "sb1",
    names.SANDBOX_NAME: "n",
    names.SANDBOX_WORKSPACE: "w",
}
NAME = names.container_name("w", "n", "sb1")  # the name podmand gives the container of LABELS
OLD = "2020-01-01T00:00:00Z"
Reply = tuple[int, dict[str, str], Any]


def rfc3339_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Container:
    """One sandbox container whose list entry and inspect answer the test flips."""

    def __init__(self) -> None:
        self.status = "running"  # or "exited", or "gone"
        self.exit_code = 0
        self.started = rfc3339_now()
        self.finished = "0001-01-01T00:00:00Z"

    def exit(self, code: int) -> None:
        self.status, self.exit_code, self.finished = "exited", code, rfc3339_now()

    def listing(self, _req: Request) -> Reply:
        if self.status == "gone":
            return 200, {}, []
        return 200, {}, [{
            "Id": CID, "Names": [NAME], "State": self.status, "Labels": LABELS, "ExitCode": self.exit_code,
            "Exited": self.status == "exited", "Created": OLD,
        }]

    def inspect(self, _req: Request) -> Reply:
        if self.status == "gone":
            return 404, {}, {"cause": "no such container", "message": f"no such container {CID}", "response": 404}
        return 200, {}, {
            "Id": CID, "Name": NAME, "Created": OLD,
            "State": {"Status": self.status, "Running": self.status == "running", "ExitCode": self.exit_code,
                      "StartedAt": self.started, "FinishedAt": self.finished},
            "Config": {"Labels": LABELS},
        }

    def install(self, fake: FakeLibpod, wait: Callable[[Request], Any]) -> None:
        fake.route("GET", "/containers/json", self.listing)
        fake.route("GET", "/containers/[^/]+/json", self.inspect)
        fake.route("POST", "/containers/[^/]+/wait", wait)
        fake.route("GET", "/networks/json", (200, {}, []))


def watch(d: Podmand) -> Iterator[pb.WatchSandboxesEvent]:
    return d.stub.WatchSandboxes(pb.WatchSandboxesRequest(), timeout=DEADLINE)  # type: ignore[no-any-return]


def next_change(events: Iterator[pb.WatchSandboxesEvent], *, skip_reason: str = "") -> pb.WatchSandboxesEvent:
    """The next sandbox or deleted event for sb1 (platform events and snapshots
    still showing ``skip_reason`` are passed over); the RPC deadline bounds it."""
    for event in events:
        kind = event.WhichOneof("payload")
        if kind == "deleted" and event.deleted.sandbox_id == "sb1":
            return event
        if kind == "sandbox" and event.sandbox.sandbox.id == "sb1":
            if skip_reason and ready(event.sandbox.sandbox).reason == skip_reason:
                continue
            return event
    raise AssertionError("watch stream ended")


def requests_after(fake: FakeLibpod, pattern: str) -> list[str]:
    """Recorded requests after the first one matching ``pattern``."""
    rx = re.compile(pattern)
    reqs = list(fake.requests)
    for i, r in enumerate(reqs):
        if rx.search(r):
            return reqs[i + 1:]
    return []


# ---------------------------------------------------------------- a. resync safety net


def test_resync_reports_exit_and_removal_without_any_podman_event(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Podman's event log can lose or delay events; the periodic resync must
    still bring an open watch to the truth: an exit (code 3), then a removal."""
    box = Container()
    box.install(fake, lambda _req: Hang())  # a /wait would never answer: only resync can tell
    d = launch(PODMAND_RESYNC_INTERVAL="0.5").wait_ready()
    events = watch(d)
    try:
        first = next_change(events)
        cond = ready(first.sandbox.sandbox)
        assert (cond.status, cond.reason) == ("True", "ContainerRunning")

        fake.call(lambda: box.exit(3))
        exited = next_change(events, skip_reason="ContainerRunning")
        cond = ready(exited.sandbox.sandbox)
        assert (cond.status, cond.reason) == ("False", "ContainerExited")
        assert "3" in cond.message

        fake.call(lambda: setattr(box, "status", "gone"))
        gone = next_change(events, skip_reason="ContainerExited")
        assert gone.WhichOneof("payload") == "deleted"
    finally:
        events.cancel()  # type: ignore[attr-defined]
    # No event delivered these: one event subscription, no /wait (exit_watch is
    # "events" by default), and GC (part of resync) ran.
    assert fake.count(r"GET .*/events") == 1
    assert fake.count(r"POST .*/containers/[^/]+/wait") == 0
    assert fake.count(r"GET .*/networks/json") >= 1


# ---------------------------------------------------------------- b. prompt exit through /wait


def test_wait_answer_delivers_exit_with_resync_off_and_no_events(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """With ``exit_watch = "wait"``, Podman's /wait answers the moment a container
    exits while its events lag: with resync off and no event sent, the exit must
    still reach the watch."""
    box = Container()
    waits = Feed(fake)
    box.install(fake, lambda _req: Stream(waits))
    d = launch(PODMAND_RESYNC_INTERVAL="0", PODMAND_EXIT_WATCH="wait").wait_ready()
    events = watch(d)
    try:
        assert ready(next_change(events).sandbox.sandbox).reason == "ContainerRunning"
        fake.wait_for(lambda: waits.opened == 1, what="the exit waiter")
        inspects = fake.count(r"GET .*/containers/[^/]+/json")

        def exit_now() -> None:
            box.exit(3)
            waits.send(b"3")  # the body "3\n", in the same step as the state change

        fake.call(exit_now)
        cond = ready(next_change(events, skip_reason="ContainerRunning").sandbox.sandbox)
        assert (cond.status, cond.reason) == ("False", "ContainerExited")
        assert "3" in cond.message
    finally:
        events.cancel()  # type: ignore[attr-defined]
    assert fake.count(r"GET .*/containers/[^/]+/json") > inspects  # the waiter's refresh re-inspected
    assert fake.count(r"GET .*/events") == 1
    assert fake.count(r"GET .*/networks/json") == 0  # no resync ran
    assert waits.opened == 1  # the exited container gets no new waiter


# ---------------------------------------------------------------- c. GC ownership


class Networks:
    """Podman's networks: listed, inspected and removed from one table."""

    def __init__(self, *nets: dict[str, Any]) -> None:
        self.table = {n["name"]: n for n in nets}

    def install(self, fake: FakeLibpod) -> None:
        fake.route("GET", "/networks/json", lambda _req: (200, {}, list(self.table.values())))
        fake.route("GET", "/networks/(?P<n>[^/]+)/json", self._inspect)
        fake.route("DELETE", "/networks/(?P<n>[^/]+)", self._remove)

    def _inspect(self, req: Request) -> Reply:
        net = self.table.get(req.path.rsplit("/", 2)[-2])
        return (200, {}, net) if net else (404, {}, {"message": "network not found"})

    def _remove(self, req: Request) -> Reply:
        if self.table.pop(req.path.rsplit("/", 1)[-1], None) is None:
            return 404, {}, {"message": "network not found"}
        return 200, {}, [{}]


def old_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "sandbox.jwt").write_text("t\n")
    past = time.time() - 3600
    os.utime(path, (past, past))
    return path


def test_gc_removes_only_podmand_owned_leftovers(
        tmp: Path, fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """GC deletes what podmand made for sandboxes that no longer exist, and
    never a network that only looks like a workspace network nor the token dir
    of a sandbox whose durable intent (volume) still exists."""
    nets = Networks(
        {"name": "openshell-gone", "created": OLD,
         "labels": {names.OWNER: names.OWNER_VALUE, names.SANDBOX_WORKSPACE: "gone"}},
        {"name": "openshell-other", "created": OLD, "labels": {names.SANDBOX_WORKSPACE: "other"}},
    )
    nets.install(fake)
    fake.volumes["openshell-sandbox-kept-workspace"] = {
        "Name": "openshell-sandbox-kept-workspace",
        "Labels": {names.OWNER: names.OWNER_VALUE, names.SANDBOX_ID: "kept", names.SANDBOX_WORKSPACE: "w"},
    }
    sandboxes = tmp / "state" / "sandboxes"
    orphan = old_dir(sandboxes / "orphan")
    kept = old_dir(sandboxes / "kept")

    d = launch(PODMAND_GC_GRACE="0", PODMAND_RESYNC_INTERVAL="0.5").wait_ready()
    deleted_ours = r"DELETE .*/networks/openshell-gone$"
    fake.wait_for(lambda: fake.count(deleted_ours) == 1, what="the orphaned workspace network to be removed")
    wait_until(lambda: not orphan.exists(), "the orphaned token directory to be removed")
    # At least one full resync after the deletion (its list, then another one).
    wait_until(lambda: sum("/networks/json" in r and r.startswith("GET")
                           for r in requests_after(fake, deleted_ours)) >= 2, "another resync")

    assert fake.count(r"DELETE .*/networks/openshell-other") == 0
    assert fake.count(deleted_ours) == 1
    assert kept.is_dir() and (kept / "sandbox.jwt").exists()
    assert "openshell-sandbox-kept-workspace" in fake.volumes
    assert d.proc.poll() is None


def test_gc_does_not_claim_to_remove_a_network_it_kept(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """collect_garbage appends ``network:<name>`` whether or not anything was
    removed, so the log says a foreign network was garbage collected on every
    resync.  An operator reading it would believe podmand deleted their network."""
    Networks(
        {"name": "openshell-gone", "created": OLD,
         "labels": {names.OWNER: names.OWNER_VALUE, names.SANDBOX_WORKSPACE: "gone"}},
        {"name": "openshell-other", "created": OLD, "labels": {names.SANDBOX_WORKSPACE: "other"}},
    ).install(fake)
    d = launch(PODMAND_GC_GRACE="0", PODMAND_RESYNC_INTERVAL="0.5").wait_ready()
    wait_until(lambda: "garbage collected" in d.log, "a GC log line")
    assert fake.count(r"DELETE .*/networks/openshell-other") == 0
    assert "network:openshell-other" not in d.log

