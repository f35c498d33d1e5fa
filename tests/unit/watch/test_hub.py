"""Unit tests for podmand.watch.hub.Hub and Stream, driven through Hub._handle.

The hub's run loop (Podman events, ticker) is not started: each test feeds
the inbox items the run loop would process, one at a time, with a stub driver.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.driver.events import deleted_event, platform_event, sandbox_event
from podmand.errors import Unavailable
from podmand.libpod import ContainerListEntry, Event, EventActor, PodmanUnavailable
from podmand.sandbox import snapshots
from podmand.watch.hub import Hub
from podmand.watch.inbox import Inbox, Listed, Lost, Observed, PodmanEvent, Resync, Subscribe, Unreadable
from podmand.watch.streams import End, Stream
from podmand.watch.subscription import Subscriber
from tests.fakes.harness import labels_for, name_for, settle

T = TypeVar("T")
DEADLINE = 5.0


class StubDriver:
    """Just what the hub calls (hub.Sandboxes): containers as Podman has them."""

    def __init__(self) -> None:
        self.boxes: dict[str, tuple[str, str, str]] = {}  # container id -> (sandbox id, Podman state, reason)
        self.seen: dict[str, str] = {}  # container id -> state when last observed
        self.looked: list[str] = []  # observe() calls, in order
        self.lists = 0
        self.gone: set[str] = set()  # forget() says True for these
        self.forgot: list[tuple[str, str]] = []
        self.forget_error: Exception | None = None  # forget() raises it (once) instead of answering
        self.gc_calls = 0
        self.list_error: Exception | None = None
        self.hold: asyncio.Event | None = None  # observe() waits on it (Podman is slow)
        self.provisioning: list[pb.DriverSandbox] = []
        self.list_reasons: dict[str, str] = {}  # container id -> the reason its list entry reads as, if not the look's

    def put(self, sandbox_id: str, state: str = "running", reason: str = "ContainerRunning") -> str:
        cid = f"cid-{sandbox_id}"
        self.boxes[cid] = (sandbox_id, state, reason)
        return cid

    async def listed(self) -> list[ContainerListEntry]:
        self.lists += 1
        if self.list_error is not None:
            raise self.list_error
        return [
            ContainerListEntry(id=cid, state=state, labels={names.SANDBOX_ID: sid})
            for cid, (sid, state, _reason) in self.boxes.items()
        ]

    async def observe(self, container_id: str) -> pb.DriverSandbox | None:
        self.looked.append(container_id)
        box = self.boxes.get(container_id)  # read when asked: a slow answer is an old one
        if self.hold is not None:
            await self.hold.wait()
        if box is None:
            self.seen.pop(container_id, None)
            return None
        self.seen[container_id] = box[1]
        return snap(box[0], box[2], "True" if box[2] == "ContainerRunning" else "False")

    async def forget(self, sandbox_id: str, container_id: str = "") -> bool:
        self.forgot.append((sandbox_id, container_id))
        if self.forget_error is not None:
            error, self.forget_error = self.forget_error, None
            raise error
        return sandbox_id in self.gone

    async def collect_garbage(self) -> list[str]:
        self.gc_calls += 1
        return []

    def pending(self, besides: set[str]) -> list[pb.DriverSandbox]:
        return [s for s in self.provisioning if s.id not in besides]

    def creating(self, sandbox_id: str) -> bool:
        return any(s.id == sandbox_id for s in self.provisioning)

    def changed(self, entry: ContainerListEntry) -> bool:
        return self.seen.get(entry.id) != entry.state

    def first_snapshot(self, entry: ContainerListEntry) -> pb.DriverSandbox | None:
        """As the list shows it: ``list_reasons`` says what an entry shows other than a look would."""
        box = self.boxes.get(entry.id)
        if box is None:
            return None
        reason = self.list_reasons.get(entry.id, box[2])
        return snap(box[0], reason, "True" if reason == "ContainerRunning" else "False")

    def unwatched(self) -> None:
        pass


def snap(sandbox_id: str, reason: str = "ContainerRunning", status: str = "True") -> pb.DriverSandbox:
    labels = {names.SANDBOX_ID: sandbox_id, names.SANDBOX_NAME: f"n-{sandbox_id}", names.SANDBOX_WORKSPACE: "ws"}
    ready = snapshots.Condition(status, reason, f"{reason} message")
    return snapshots.snapshot(labels, container_name=f"c-{sandbox_id}", container_id=f"cid-{sandbox_id}", ready=ready)


def run(body: Callable[[Hub, StubDriver], Awaitable[T]], *, buffer: int = 1024, boxes: tuple[str, ...] = ()) -> T:
    """Run ``body`` with a fresh hub and stub driver on a new loop, connected as the
    hub's loop connects: one list, every listed container (``boxes``) looked at."""

    async def main() -> T:
        driver = StubDriver()
        for sandbox_id in boxes:
            driver.put(sandbox_id)
        hub = Hub(None, driver, Inbox(), buffer=buffer, resync=0)  # type: ignore[arg-type]
        hub._list(first=True)
        await settle(hub, hub.inbox)
        assert hub.connected.is_set()
        return await asyncio.wait_for(body(hub, driver), DEADLINE)

    return asyncio.run(main())


async def drain(hub: Hub) -> None:
    await settle(hub, hub.inbox)


async def subscribe(hub: Hub) -> Stream:
    stream = await hub.subscribe()
    await drain(hub)
    return stream


async def publish(hub: Hub, *events: pb.WatchSandboxesEvent) -> None:
    for event in events:
        hub.inbox.publish(event)
    await drain(hub)


async def take(stream: Stream, n: int) -> list[pb.WatchSandboxesEvent | End]:
    return [await stream.get() for _ in range(n)]


def describe(item: pb.WatchSandboxesEvent | End) -> tuple[str, ...]:
    """A comparable summary: ('sandbox', id, reason), ('deleted', id), ('platform', reason) or ('end', code)."""
    if isinstance(item, End):
        return ("end", item.code.name)
    kind = item.WhichOneof("payload")
    if kind == "sandbox":
        s = item.sandbox.sandbox
        return ("sandbox", s.id, s.status.conditions[0].reason)
    if kind == "deleted":
        return ("deleted", item.deleted.sandbox_id)
    return ("platform", item.platform_event.event.reason)


def marker(reason: str) -> pb.WatchSandboxesEvent:
    """A platform event: never deduplicated, so it proves what came before it."""
    return platform_event("sb-x", reason, "marker")


def podman_event(action: str, cid: str, sandbox_id: str) -> PodmanEvent:
    attributes = {**labels_for(sandbox_id), "name": name_for(sandbox_id)}
    return PodmanEvent(Event(Type="container", Action=action, Actor=EventActor(id=cid, attributes=attributes)))


# ---------------------------------------------------------------- (a) snapshot, then live


def test_new_stream_gets_snapshot_then_live_events_in_order() -> None:
    """A gateway rebuilds its view from the snapshot and then applies changes:
    the snapshot must come first and live publications must keep their order."""

    async def body(hub: Hub, driver: StubDriver) -> list[tuple[str, ...]]:
        stream = await subscribe(hub)
        await publish(
            hub,
            sandbox_event(snap("s1", "ContainerExited", "False")),
            marker("M1"),
            deleted_event("s2"),
            sandbox_event(snap("s3", "Starting", "False")),
        )
        return [describe(e) for e in await take(stream, 6)]

    assert run(body, boxes=("s1", "s2")) == [
        ("sandbox", "s1", "ContainerRunning"),
        ("sandbox", "s2", "ContainerRunning"),
        ("sandbox", "s1", "ContainerExited"),
        ("platform", "M1"),
        ("deleted", "s2"),
        ("sandbox", "s3", "Starting"),
    ]


def test_a_new_stream_is_served_from_what_the_hub_told_without_asking_podman() -> None:
    """The snapshot of a new stream is the hub's last word on every sandbox (a change
    queued before the subscription included, once) plus what is still provisioning:
    no list and no inspect, so a new stream never holds up live events."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], int, int]:
        lists, looks = driver.lists, len(driver.looked)
        driver.provisioning = [snap("p1", "Starting", "False"), snap("s1", "Starting", "False")]
        hub.inbox.publish(sandbox_event(snap("s2", "ContainerExited", "False")))
        stream = await hub.subscribe()
        await drain(hub)
        await publish(hub, marker("M"))
        got = [describe(e) for e in await take(stream, 4)]
        return got, driver.lists - lists, len(driver.looked) - looks

    got, lists, looks = run(body, boxes=("s1", "s2"))
    assert got == [
        ("sandbox", "s1", "ContainerRunning"),
        ("sandbox", "s2", "ContainerExited"),
        ("sandbox", "p1", "Starting"),  # provisioning, never published: from the driver
        ("platform", "M"),
    ]
    assert (lists, looks) == (0, 0)


# ---------------------------------------------------------------- (b) per-stream dedup


def test_repeated_snapshot_reaches_a_stream_once() -> None:
    """Resyncs and events re-publish unchanged state; clients must not see repeats."""

    async def body(hub: Hub, driver: StubDriver) -> list[tuple[str, ...]]:
        stream = await subscribe(hub)
        exited = sandbox_event(snap("s1", "ContainerExited", "False"))
        await publish(hub, exited, exited, marker("M"))
        return [describe(e) for e in await take(stream, 2)]

    assert run(body) == [("sandbox", "s1", "ContainerExited"), ("platform", "M")]


def test_later_stream_gets_a_change_other_streams_already_saw() -> None:
    """Dedup is per stream: A was told X then Y; B subscribes (told Y); X again is news
    to both and reaches both, once."""

    x = snap("s1", "ContainerRunning")
    y = snap("s1", "ContainerExited", "False")

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
        a = await subscribe(hub)
        await publish(hub, sandbox_event(x), sandbox_event(y))
        b = await subscribe(hub)
        await publish(hub, sandbox_event(x), sandbox_event(x), marker("M"))
        return [describe(e) for e in await take(a, 4)], [describe(e) for e in await take(b, 3)]

    a_saw, b_saw = run(body)
    assert a_saw == [
        ("sandbox", "s1", "ContainerRunning"),
        ("sandbox", "s1", "ContainerExited"),
        ("sandbox", "s1", "ContainerRunning"),
        ("platform", "M"),
    ]
    assert b_saw == [("sandbox", "s1", "ContainerExited"), ("sandbox", "s1", "ContainerRunning"), ("platform", "M")]


def test_sandbox_recreated_after_deleted_is_sent_again() -> None:
    """After Deleted the same state for the same ID is news again (the ID was reused)."""

    async def body(hub: Hub, driver: StubDriver) -> list[tuple[str, ...]]:
        stream = await subscribe(hub)
        running = sandbox_event(snap("s1"))
        await publish(hub, running, deleted_event("s1"), deleted_event("s1"), running)
        return [describe(e) for e in await take(stream, 3)]

    assert run(body) == [
        ("sandbox", "s1", "ContainerRunning"),
        ("deleted", "s1"),
        ("sandbox", "s1", "ContainerRunning"),
    ]


# ---------------------------------------------------------------- (c) slow consumer


def test_stalled_stream_is_ended_alone_with_resource_exhausted() -> None:
    """A client that stops reading must not grow memory without bound nor hold
    back others: with buffer 4 its 5th pending event ends it, while a reading
    stream keeps getting every event in order."""

    Result = tuple[list[tuple[str, ...]], list[Any], End | pb.WatchSandboxesEvent]

    async def body(hub: Hub, driver: StubDriver) -> Result:
        stalled = await subscribe(hub)
        reader = await subscribe(hub)
        got: list[tuple[str, ...]] = []
        ends_before_5th: list[Any] = []
        for i in range(1, 7):
            await publish(hub, sandbox_event(snap("s1", f"R{i}", "False")))
            got.append(describe(await reader.get()))
            if i == 4:
                ends_before_5th.append(stalled.end)
        return got, ends_before_5th, await stalled.get()

    got, ends_before_5th, stalled_next = run(body, buffer=4)
    assert ends_before_5th == [None]  # four pending events fit
    assert isinstance(stalled_next, End)
    assert stalled_next.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert got == [("sandbox", "s1", f"R{i}") for i in range(1, 7)]


def test_duplicates_do_not_count_against_the_buffer() -> None:
    """Dedup happens before the bound: repeats of one state never end a slow stream."""

    async def body(hub: Hub, driver: StubDriver) -> list[tuple[str, ...]]:
        stream = await subscribe(hub)
        same = sandbox_event(snap("s1"))
        await publish(hub, *[same] * 10, marker("M"))
        assert stream.end is None
        return [describe(e) for e in await take(stream, 2)]

    assert run(body, buffer=2) == [("sandbox", "s1", "ContainerRunning"), ("platform", "M")]


# ---------------------------------------------------------------- (d) close


def test_close_ends_every_stream_and_later_subscriptions_with_unavailable() -> None:
    """On shutdown the gateway must be told to re-watch (UNAVAILABLE) on every
    stream, including one whose subscribe request was still queued."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[Any], Any, int]:
        a = await subscribe(hub)
        b = await subscribe(hub)
        await take(a, 1)  # a has read its snapshot; b has not
        queued = await hub.subscribe()  # accepted while still open, processed after close
        calls_before = driver.lists + len(driver.looked)
        hub.close()
        await drain(hub)
        ends = [await s.get() for s in (a, b, queued)]
        with pytest.raises(Unavailable) as late:
            await hub.subscribe()
        return ends, late.value.code, driver.lists + len(driver.looked) - calls_before

    ends, late_code, podman_calls_after_close = run(body, boxes=("s1",))
    assert [describe(e) for e in ends] == [("end", "UNAVAILABLE")] * 3
    assert late_code == grpc.StatusCode.UNAVAILABLE
    assert podman_calls_after_close == 0  # no Podman work for a stream that is already over


# ---------------------------------------------------------------- (e) resync


def test_resync_emits_changes_and_deletes_what_vanished_then_collects_garbage() -> None:
    """The safety net for lost events: one list; a container whose state the hub did
    not see change is looked at and re-sent, one that vanished from Podman becomes
    Deleted (once forget() confirms), an unchanged one costs nothing, GC runs."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], list[tuple[str, str]], list[str], int]:
        stream = await subscribe(hub)
        await take(stream, 3)
        looked = len(driver.looked)
        driver.put("s1", "exited", "ContainerExited")
        del driver.boxes["cid-s2"]
        driver.gone = {"s2"}
        hub.inbox.put(Resync())
        await drain(hub)
        await publish(hub, marker("M"))
        return [describe(e) for e in await take(stream, 3)], driver.forgot, driver.looked[looked:], driver.gc_calls

    events, forgot, looked, gc_calls = run(body, boxes=("s1", "s2", "s3"))
    assert events == [("sandbox", "s1", "ContainerExited"), ("deleted", "s2"), ("platform", "M")]
    assert forgot == [("s2", "")]  # only what vanished
    assert looked == ["cid-s1"]  # s3 did not change: no inspect
    assert gc_calls == 1


def test_resync_sends_no_deleted_when_forget_declines_and_nothing_when_unchanged() -> None:
    """forget() says False while a sandbox is being deleted or still provisioning:
    no Deleted then.  A resync that finds no change must send nothing, and a
    sandbox already reported Deleted is not forgotten again."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], list[tuple[str, str]], int]:
        stream = await subscribe(hub)
        await take(stream, 2)
        del driver.boxes["cid-s2"]
        for gone in (set(), {"s2"}, {"s2"}):  # forget declines, then it is really gone, then already told
            driver.gone = gone
            hub.inbox.put(Resync())
            await drain(hub)
        await publish(hub, marker("M"))
        return [describe(e) for e in await take(stream, 2)], driver.forgot, driver.gc_calls

    events, forgot, gc_calls = run(body, boxes=("s1", "s2"))
    assert events == [("deleted", "s2"), ("platform", "M")]
    assert forgot == [("s2", ""), ("s2", "")]
    assert gc_calls == 3


def test_a_resync_list_runs_off_the_hub_and_one_at_a_time() -> None:
    """While a resync's list is out, live publications still reach streams, and
    further resync requests start no second list."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], int]:
        stream = await subscribe(hub)
        await take(stream, 1)
        lists = driver.lists
        hub.inbox.put(Resync())
        hub.inbox.put(Resync())
        while (message := hub.inbox.get_nowait()) is not None:
            hub._handle(message)  # the list task has not run yet
        hub.inbox.publish(marker("live"))
        while (message := hub.inbox.get_nowait()) is not None:
            hub._handle(message)
        got = [describe(await stream.get())]
        await drain(hub)
        return got, driver.lists - lists

    got, lists = run(body, boxes=("s1",))
    assert got == [("platform", "live")]
    assert lists == 1


# ---------------------------------------------------------------- looks: never on the hub task


def test_the_hub_handles_messages_while_podman_is_slow_to_answer_a_look() -> None:
    """An inspect that hangs holds up no stream: publications and new subscribers are
    served meanwhile, and the look's answer arrives afterwards."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
        a = await subscribe(hub)
        await take(a, 1)
        driver.hold = asyncio.Event()
        driver.put("s1", "exited", "ContainerExited")
        hub.inbox.put(podman_event("died", "cid-s1", "s1"))
        hub.inbox.publish(marker("M"))
        b = await hub.subscribe()
        while (message := hub.inbox.get_nowait()) is not None:
            hub._handle(message)
        early = [describe(await a.get()), describe(await b.get())]
        driver.hold.set()
        await drain(hub)
        return early, [describe(await a.get()), describe(await b.get())]

    early, late = run(body, boxes=("s1",))
    assert early == [("platform", "M"), ("sandbox", "s1", "ContainerRunning")]
    assert late == [("sandbox", "s1", "ContainerExited")] * 2


def test_events_during_a_look_cost_one_more_look_not_one_each() -> None:
    async def body(hub: Hub, driver: StubDriver) -> tuple[list[str], list[tuple[str, ...]]]:
        stream = await subscribe(hub)
        await take(stream, 1)
        looked = len(driver.looked)
        driver.hold = asyncio.Event()
        for action in ("kill", "died", "cleanup", "stop"):
            hub.inbox.put(podman_event(action, "cid-s1", "s1"))
        while (message := hub.inbox.get_nowait()) is not None:
            hub._handle(message)
        driver.put("s1", "exited", "ContainerExited")
        driver.hold.set()
        await drain(hub)
        return driver.looked[looked:], [describe(await stream.get())]

    looked, got = run(body, boxes=("s1",))
    assert looked == ["cid-s1", "cid-s1"]  # the first (from before the change) and one more
    assert got == [("sandbox", "s1", "ContainerExited")]


def test_a_look_overtaken_by_the_drivers_word_is_dropped() -> None:
    """A look asked before the driver published (Deleted, or a provisioning snapshot)
    answers from an older Podman: sent after, it would roll the streams back."""

    async def body(hub: Hub, driver: StubDriver) -> list[tuple[str, ...]]:
        stream = await subscribe(hub)
        await take(stream, 2)
        driver.hold = asyncio.Event()
        hub.inbox.put(podman_event("stop", "cid-s1", "s1"))
        hub.inbox.put(podman_event("start", "cid-s2", "s2"))
        while (message := hub.inbox.get_nowait()) is not None:
            hub._handle(message)  # both looks are out, answering from before what follows
        hub.inbox.publish(deleted_event("s1"))
        hub.inbox.publish(sandbox_event(snap("s2", "ContainerStartFailed", "False")))
        driver.hold.set()
        await drain(hub)
        await publish(hub, marker("M"))
        return [describe(e) for e in await take(stream, 3)]

    assert run(body, boxes=("s1", "s2")) == [
        ("deleted", "s1"),
        ("sandbox", "s2", "ContainerStartFailed"),
        ("platform", "M"),
    ]


def test_a_removed_container_is_not_inspected_and_its_sandbox_forgotten() -> None:
    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], list[str], list[tuple[str, str]]]:
        stream = await subscribe(hub)
        await take(stream, 1)
        looked = len(driver.looked)
        del driver.boxes["cid-s1"]
        driver.gone = {"s1"}
        hub.inbox.put(podman_event("remove", "cid-s1", "s1"))
        await drain(hub)
        return [describe(await stream.get())], driver.looked[looked:], driver.forgot

    got, looked, forgot = run(body, boxes=("s1",))
    assert got == [("deleted", "s1")]
    assert looked == []
    assert forgot == [("s1", "cid-s1")]


@pytest.mark.parametrize("how", ["resync", "remove event"])
def test_a_forget_whose_removal_podman_failed_is_one_warning_and_asked_again(
        how: str, caplog: pytest.LogCaptureFixture) -> None:
    """A forget's removal Podman failed in its network teardown (driver/teardown.py's
    Unavailable): one warning, no traceback, no Deleted; the next resync forgets it."""
    failed = Unavailable("sandbox s1: removing its container failed 3 times in Podman's network teardown "
                         "(netavark); try again: ...")

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], list[tuple[str, str]]]:
        stream = await subscribe(hub)
        await take(stream, 1)
        del driver.boxes["cid-s1"]
        driver.gone, driver.forget_error = {"s1"}, failed
        hub.inbox.put(Resync() if how == "resync" else podman_event("remove", "cid-s1", "s1"))
        await drain(hub)
        await publish(hub, marker("M"))  # nothing before it: no Deleted
        hub.inbox.put(Resync())
        await drain(hub)
        return [describe(e) for e in await take(stream, 2)], driver.forgot

    with caplog.at_level("WARNING", logger="podmand.watch.hub"):
        got, forgot = run(body, boxes=("s1",))
    first = ("s1", "") if how == "resync" else ("s1", "cid-s1")  # lists.py's forget, or looks.py's
    assert got == [("platform", "M"), ("deleted", "s1")] and forgot == [first, ("s1", "")]
    warned = [r for r in caplog.records if "netavark" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING" and warned[0].exc_info is None


# ---------------------------------------------------------------- connecting


def test_streams_are_served_from_one_list_and_looks_refine_only_what_differs() -> None:
    """On (re)connecting, a stream that subscribes before the first list is back waits for
    it alone: with every look held (Podman slow to inspect), it is served each sandbox's
    snapshot from the list; once the looks answer, only the sandbox whose look says other
    than its list entry (an OOM kill the list cannot show) is told again. A first list
    that fails ends the subscription (Lost) so that the hub connects again."""

    async def main() -> tuple[bool, bool, list[tuple[str, ...]], list[str], list[tuple[str, ...]], Any]:
        driver = StubDriver()
        driver.put("s1")
        cid2 = driver.put("s2", "exited", "OOMKilled")
        driver.list_reasons[cid2] = "ContainerRuntimeRestart"  # exit code 137, no OOM flag in a list
        hub = Hub(None, driver, Inbox(), resync=0)  # type: ignore[arg-type]
        driver.hold = asyncio.Event()  # no inspect answers
        hub._list(first=True)
        waiting = Stream(16)
        hub.inbox.put(Subscribe(waiting))
        hub._handle(hub.inbox.get_nowait())  # type: ignore[arg-type]
        served_before_list = hub.connected.is_set() or waiting in hub.fanout.streams
        while (listed := hub.inbox.get_nowait()) is None:
            await asyncio.sleep(0)
        hub._handle(listed)  # the list came back; the looks are out and held
        connected = hub.connected.is_set() and waiting in hub.fanout.streams
        first = [describe(await waiting.get()) for _ in range(2)]
        held = sorted(hub.looks.in_flight())
        driver.hold.set()
        await settle(hub, hub.inbox)
        hub.inbox.publish(marker("M"))
        await settle(hub, hub.inbox)
        refined = [describe(await waiting.get()) for _ in range(2)]
        failing = Hub(None, StubDriver(), Inbox(), resync=0)  # type: ignore[arg-type]
        failing.sandboxes.list_error = PodmanUnavailable("gone")  # type: ignore[attr-defined]
        failing._list(first=True)
        await asyncio.wait(failing.lists._work)
        return served_before_list, connected, first, held, refined, failing.inbox.get_nowait()

    served_before_list, connected, first, held, refined, lost = asyncio.run(main())
    assert served_before_list is False
    assert connected is True
    assert held == ["cid-s1", "cid-s2"]  # served while both looks were still out
    assert sorted(first) == [("sandbox", "s1", "ContainerRunning"), ("sandbox", "s2", "ContainerRuntimeRestart")]
    assert refined == [("sandbox", "s2", "OOMKilled"), ("platform", "M")]  # nothing again for s1
    assert isinstance(lost, Lost) and isinstance(lost.error, PodmanUnavailable)


def test_a_first_list_does_not_roll_back_what_streams_were_told_meanwhile() -> None:
    """The driver's word while the first list is out is newer than the list's entries."""

    async def main() -> list[tuple[str, ...]]:
        driver = StubDriver()
        cid = driver.put("s1")
        driver.list_reasons[cid] = "ContainerCreated"  # the list saw it before it started
        hub = Hub(None, driver, Inbox(), resync=0)  # type: ignore[arg-type]
        driver.hold = asyncio.Event()
        hub._list(first=True)
        hub.inbox.publish(sandbox_event(snap("s1", "ContainerRunning")))
        while (message := hub.inbox.get_nowait()) is not None or not hub.connected.is_set():
            if message is not None:
                hub._handle(message)
            else:
                await asyncio.sleep(0)
        return [("told", hub.fanout.told["s1"].status.conditions[0].reason)]

    assert asyncio.run(main()) == [("told", "ContainerRunning")]


# ---------------------------------------------------------------- unreadable events (issue 9, finding 4)


def test_event_lines_skip_what_cannot_be_read_and_keep_the_rest() -> None:
    """An over-long line (split across chunks or whole) and an undecodable one become
    BadEvent naming the container; the events around them still decode."""
    from podmand.libpod import BadEvent, Event, lines

    cid = "ab" * 32
    good = b'{"Type":"container","Action":"start","Actor":{"ID":"' + cid.encode() + b'"}}'
    huge = b'{"status":"died","id":"' + cid.encode() + b'","Actor":{"Attributes":{"x":"' + b"<" * (5 << 20)

    async def chunks() -> Any:
        yield good + b"\n" + huge[: 3 << 20]
        yield huge[3 << 20 :]
        yield b'"}}}\n' + good + b"\n" + huge + b'"}}}\n{"Type":\n' + good

    async def main() -> list[Any]:
        return [e async for e in lines.decode_events(lines.split_lines(chunks()))]

    out = asyncio.run(main())
    kinds = [type(e).__name__ for e in out]
    assert kinds == ["Event", "BadEvent", "Event", "BadEvent", "BadEvent", "Event"]
    bad = [e for e in out if isinstance(e, BadEvent)]
    assert [b.container_id for b in bad] == [cid, cid, ""]
    assert "over the" in bad[0].reason and "undecodable" in bad[2].reason
    assert all(e.Actor.id == cid for e in out if isinstance(e, Event))


def test_unreadable_event_resyncs_instead_of_ending_streams() -> None:
    async def body(hub: Hub, driver: StubDriver) -> None:
        from podmand.libpod import BadEvent

        stream = await subscribe(hub)
        assert await stream.get() == sandbox_event(snap("a"))
        driver.put("a", "exited", "ContainerExited")
        hub.inbox.put(Unreadable(BadEvent("cid-a", "too long")))
        await drain(hub)
        assert await stream.get() == sandbox_event(snap("a", "ContainerExited", "False"))
        assert stream.end is None and stream in hub.fanout.streams

    run(body, boxes=("a",))


def test_answers_to_an_ended_event_subscription_are_ignored() -> None:
    """A list or a look that came back just as Podman's stream broke describes a world
    the next subscription looks at afresh: it must not serve streams early or twice."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[int, int, bool]:
        old = hub._subscription
        await hub._stop_work()  # what the run loop does when the subscription ends
        hub.connected.clear()
        hub._handle(Listed([ContainerListEntry(id="cid-s1", labels={names.SANDBOX_ID: "s1"})], True, frozenset(), old))
        hub._handle(Observed("cid-s1", "s1", snap("s1"), False, hub._count, old))
        return len(hub.looks._looking), len(hub.fanout.told), hub.connected.is_set()

    assert run(body, boxes=("s1",)) == (0, 0, False)


def test_create_and_init_of_a_container_podmand_is_making_cost_no_look() -> None:
    """Provisioning asks for a look once it started the container: Podman's create and
    init events of it would only show a state the pending snapshot already tells."""

    async def body(hub: Hub, driver: StubDriver) -> list[str]:
        driver.provisioning = [snap("s2", "ContainerStarting", "False")]
        driver.put("s2", "created", "ContainerCreated")
        for action in ("create", "init"):
            hub.inbox.put(podman_event(action, "cid-s2", "s2"))
        hub.inbox.put(podman_event("create", "cid-s3", "s3"))  # made by someone else: looked at
        await drain(hub)
        return driver.looked

    assert run(body) == ["cid-s3"]


def test_a_deleted_found_by_a_look_survives_the_end_of_its_subscription() -> None:
    """forget() already removed what podmand made of the sandbox: its Deleted is true
    whatever happened to Podman's event stream meanwhile, and it is sent."""

    async def body(hub: Hub, driver: StubDriver) -> list[tuple[str, ...]]:
        old = hub._subscription
        await hub._stop_work()
        hub.connected.set()
        stream = await subscribe(hub)
        hub._handle(Observed("cid-s1", "s1", None, True, hub._count, old))
        return [describe(await stream.get())]

    assert run(body, boxes=("s1",)) == [("deleted", "s1")]


def test_the_end_of_an_ended_subscription_does_not_end_the_next() -> None:
    """The pump and a failed first list can both report one loss: the second report must
    not end the subscription made after it."""

    async def main() -> bool:
        hub = Hub(None, StubDriver(), Inbox(), resync=0)  # type: ignore[arg-type]
        old = hub._subscription
        await hub._stop_work()
        hub.inbox.put(Lost(PodmanUnavailable("gone"), old))
        hub.inbox.put(Lost(None))  # the open subscription's own end
        await hub._process()  # returns on the second only: the first is skipped
        return hub.inbox.get_nowait() is None

    assert asyncio.run(main()) is True


def test_a_silent_stream_resyncs_every_silent_resync_seconds_never_slower_than_resync() -> None:
    def interval(resync: float, silent_resync: float, silent: bool) -> float:
        return Subscriber(None, Inbox(), resync=resync, prove=None, silent_resync=silent_resync)._interval(silent)  # type: ignore[arg-type]

    assert [interval(30, 5, False), interval(30, 5, True)] == [30, 5]
    assert interval(2, 5, True) == 2  # a shorter resync_interval stays
    assert interval(0, 5, True) == 5  # resync off: while silent, the silent one still runs
    assert interval(30, 0, True) == 30  # resync_interval_silent = 0: resync_interval


def stamped(action: str, cid: str, sandbox_id: str, time_ns: int) -> PodmanEvent:
    message = podman_event(action, cid, sandbox_id)
    message.event.timeNano = time_ns
    return message


def test_events_of_a_start_podmand_made_cost_no_look_beyond_its_own() -> None:
    """Provisioning's look after its start (refresh(started=True)) reads a state newer than
    Podman's create, init and start events of that start, wherever they land in the inbox:
    one inspect per create. A start after it (out of band) is looked at as ever."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[str], list[str]]:
        driver.put("s2")
        before = time.time_ns()
        hub.inbox.put(stamped("create", "cid-s2", "s2", before))  # queued before provisioning popped
        hub.inbox.refresh("cid-s2", "s2", started=True)
        for action in ("init", "start"):  # delivered late by Podman's event stream
            hub.inbox.put(stamped(action, "cid-s2", "s2", before + 1))
        await drain(hub)
        made = list(driver.looked)
        hub.inbox.put(stamped("start", "cid-s2", "s2", time.time_ns()))  # e.g. podman restart
        hub.inbox.put(stamped("start", "cid-s3", "s3", before))  # another container: looked at
        await drain(hub)
        return made, driver.looked[len(made):]

    assert run(body) == (["cid-s2"], ["cid-s2", "cid-s3"])


def test_an_event_without_a_time_is_looked_at_after_a_start_podmand_made() -> None:
    """An event Podman did not stamp cannot be placed before the driver's look: looked at."""

    async def body(hub: Hub, driver: StubDriver) -> int:
        driver.put("s2")
        hub.inbox.refresh("cid-s2", "s2", started=True)
        await drain(hub)
        hub.inbox.put(stamped("start", "cid-s2", "s2", 0))
        await drain(hub)
        return driver.looked.count("cid-s2")

    assert run(body) == 2
