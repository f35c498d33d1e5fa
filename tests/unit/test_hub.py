"""Unit tests for podmand.hub.Hub and Stream, driven through Hub._handle.

The hub's run loop (Podman events, ticker) is not started: each test feeds
the inbox items the run loop would process, one at a time, with a stub driver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import pytest

from podmand import names, snapshots
from podmand._proto import compute_driver_pb2 as pb
from podmand.driver.events import deleted_event, platform_event, sandbox_event
from podmand.errors import Unavailable
from podmand.hub import End, Hub, Inbox, Lost, Resync, Stream, Unreadable
from podmand.libpod import PodmanError

T = TypeVar("T")
DEADLINE = 5.0


class StubDriver:
    """Just what the hub calls (hub.Sandboxes)."""

    def __init__(self) -> None:
        self.snaps: list[pb.DriverSandbox] = []
        self.snapshot_calls = 0
        self.gone: set[str] = set()  # forget() says True for these
        self.forgot: list[str] = []
        self.gc_calls = 0
        self.snapshot_error: Exception | None = None

    async def snapshot_all(self) -> list[pb.DriverSandbox]:
        self.snapshot_calls += 1
        if self.snapshot_error is not None:
            raise self.snapshot_error
        return list(self.snaps)

    async def observe(self, container_id: str) -> pb.DriverSandbox | None:
        return None

    async def forget(self, sandbox_id: str) -> bool:
        self.forgot.append(sandbox_id)
        return sandbox_id in self.gone

    async def collect_garbage(self) -> list[str]:
        self.gc_calls += 1
        return []


def snap(sandbox_id: str, reason: str = "ContainerRunning", status: str = "True") -> pb.DriverSandbox:
    labels = {names.SANDBOX_ID: sandbox_id, names.SANDBOX_NAME: f"n-{sandbox_id}", names.SANDBOX_WORKSPACE: "ws"}
    ready = snapshots.Condition(status, reason, f"{reason} message")
    return snapshots.snapshot(labels, container_name=f"c-{sandbox_id}", container_id=f"cid-{sandbox_id}", ready=ready)


def run(body: Callable[[Hub, StubDriver], Awaitable[T]], *, buffer: int = 1024) -> T:
    """Run ``body`` with a fresh hub (connected) and stub driver on a new loop."""

    async def main() -> T:
        driver = StubDriver()
        hub = Hub(None, driver, Inbox(), buffer=buffer, resync=0)  # type: ignore[arg-type]
        hub.connected.set()
        return await asyncio.wait_for(body(hub, driver), DEADLINE)

    return asyncio.run(main())


async def drain(hub: Hub) -> None:
    """Process everything queued in the inbox, as Hub._process would."""
    while (message := hub.inbox.get_nowait()) is not None:
        assert not isinstance(message, Lost)
        await hub._handle(message)


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


# ---------------------------------------------------------------- (a) snapshot, then live


def test_new_stream_gets_snapshot_then_live_events_in_order() -> None:
    """A gateway rebuilds its view from the snapshot and then applies changes:
    the snapshot must come first and live publications must keep their order."""

    async def body(hub: Hub, driver: StubDriver) -> list[tuple[str, ...]]:
        driver.snaps = [snap("s1"), snap("s2")]
        stream = await subscribe(hub)
        await publish(
            hub,
            sandbox_event(snap("s1", "ContainerExited", "False")),
            marker("M1"),
            deleted_event("s2"),
            sandbox_event(snap("s3", "Starting", "False")),
        )
        return [describe(e) for e in await take(stream, 6)]

    assert run(body) == [
        ("sandbox", "s1", "ContainerRunning"),
        ("sandbox", "s2", "ContainerRunning"),
        ("sandbox", "s1", "ContainerExited"),
        ("platform", "M1"),
        ("deleted", "s2"),
        ("sandbox", "s3", "Starting"),
    ]


def test_publication_queued_before_subscription_is_not_replayed_after_snapshot() -> None:
    """A change queued before the subscribe request is already in the truth the
    snapshot reads; replaying the stale event after the snapshot would roll the
    gateway's view back."""

    async def body(hub: Hub, driver: StubDriver) -> list[tuple[str, ...]]:
        hub.inbox.publish(sandbox_event(snap("s1", "Starting", "False")))  # older than the truth
        driver.snaps = [snap("s1")]
        stream = await hub.subscribe()
        await drain(hub)
        await publish(hub, marker("M"))
        return [describe(e) for e in await take(stream, 2)]

    assert run(body) == [("sandbox", "s1", "ContainerRunning"), ("platform", "M")]


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
    """Stale-global-dedup race: A saw X, B subscribed while the truth was Y, then
    X is published again.  A must not get X twice; B must get X, or it is left
    believing Y forever."""

    x = snap("s1", "ContainerRunning")
    y = snap("s1", "ContainerExited", "False")

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
        a = await subscribe(hub)
        await publish(hub, sandbox_event(x))  # A is told X live
        driver.snaps = [y]  # the truth moved on; its event has not reached the hub yet
        b = await subscribe(hub)
        await publish(hub, sandbox_event(x), marker("M"))
        return [describe(e) for e in await take(a, 2)], [describe(e) for e in await take(b, 3)]

    a_saw, b_saw = run(body)
    assert a_saw == [("sandbox", "s1", "ContainerRunning"), ("platform", "M")]
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
        driver.snaps = [snap("s1")]
        a = await subscribe(hub)
        b = await subscribe(hub)
        await take(a, 1)  # a has read its snapshot; b has not
        queued = await hub.subscribe()  # accepted while still open, processed after close
        calls_before = driver.snapshot_calls
        hub.close()
        await drain(hub)
        ends = [await s.get() for s in (a, b, queued)]
        with pytest.raises(Unavailable) as late:
            await hub.subscribe()
        return ends, late.value.code, driver.snapshot_calls - calls_before

    ends, late_code, snapshots_after_close = run(body)
    assert [describe(e) for e in ends] == [("end", "UNAVAILABLE")] * 3
    assert late_code == grpc.StatusCode.UNAVAILABLE
    assert snapshots_after_close == 0  # no Podman work for a stream that is already over


# ---------------------------------------------------------------- (e) resync


def test_resync_emits_changes_and_deletes_what_vanished_then_collects_garbage() -> None:
    """The safety net for lost events: a changed sandbox is re-sent, one that
    vanished from Podman becomes Deleted (once forget() confirms), GC runs."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], list[str], int]:
        driver.snaps = [snap("s1"), snap("s2")]
        stream = await subscribe(hub)
        await take(stream, 2)
        driver.snaps = [snap("s1", "ContainerExited", "False")]
        driver.gone = {"s2"}
        await hub._handle(Resync())
        await publish(hub, marker("M"))
        return [describe(e) for e in await take(stream, 3)], list(driver.forgot), driver.gc_calls

    events, forgot, gc_calls = run(body)
    assert events == [("sandbox", "s1", "ContainerExited"), ("deleted", "s2"), ("platform", "M")]
    assert forgot == ["s2"]  # only what vanished
    assert gc_calls == 1


def test_resync_sends_no_deleted_when_forget_declines_and_nothing_when_unchanged() -> None:
    """forget() says False while a sandbox is being deleted or still provisioning:
    no Deleted then.  A resync that finds no change must send nothing, and a
    sandbox already reported Deleted is not forgotten again."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[list[tuple[str, ...]], list[str], int]:
        driver.snaps = [snap("s1"), snap("s2")]
        stream = await subscribe(hub)
        await take(stream, 2)
        driver.snaps = [snap("s1")]
        await hub._handle(Resync())  # s2 missing, forget declines
        driver.gone = {"s2"}
        await hub._handle(Resync())  # now it is really gone
        await hub._handle(Resync())  # already told: nothing more
        await publish(hub, marker("M"))
        return [describe(e) for e in await take(stream, 2)], list(driver.forgot), driver.gc_calls

    events, forgot, gc_calls = run(body)
    assert events == [("deleted", "s2"), ("platform", "M")]
    assert forgot == ["s2", "s2"]
    assert gc_calls == 3


# ---------------------------------------------------------------- failed snapshot


def test_subscribe_whose_snapshot_fails_ends_the_stream() -> None:
    """If Podman errors while the snapshot is computed, the new stream is not
    registered, so no later _end_all reaches it: it must be ended right there
    (UNAVAILABLE), or the gateway's watch hangs with no events and never retries."""

    async def body(hub: Hub, driver: StubDriver) -> tuple[End | pb.WatchSandboxesEvent, bool]:
        driver.snapshot_error = PodmanError(500, "boom")
        stream = await hub.subscribe()
        hub.inbox.put(Lost(None))  # let _process return after the subscribe
        await hub._process()  # logs the PodmanError and goes on
        return await stream.get(), stream in hub._streams

    item, registered = run(body)
    assert isinstance(item, End) and item.code == grpc.StatusCode.UNAVAILABLE
    assert "boom" in item.message
    assert not registered


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

        driver.snaps = [snap("a")]
        stream = await hub.subscribe()
        await drain(hub)
        assert await stream.get() == sandbox_event(snap("a"))
        driver.snaps = [snap("a", "ContainerExited", "False")]
        hub.inbox.put(Unreadable(BadEvent("cid-a", "too long")))
        await drain(hub)
        assert await stream.get() == sandbox_event(snap("a", "ContainerExited", "False"))
        assert stream.end is None and stream in hub._streams

    run(body)
