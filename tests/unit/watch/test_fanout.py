"""Unit tests for podmand.watch.fanout: every stream is put the same told events.

An extra watch stream must cost references, not a copy of every snapshot: the
event objects a new stream is given, and the key bytes it deduplicates with,
are the very ones the fanout keeps (identity, not equality, is asserted).
"""

from __future__ import annotations

import asyncio

from podmand._proto import compute_driver_pb2 as pb
from podmand.driver.events import deleted_event, sandbox_event
from podmand.watch.fanout import Fanout
from podmand.watch.streams import Stream


def snap(sandbox_id: str, phase: str = "Running") -> pb.DriverSandbox:
    box = pb.DriverSandbox(id=sandbox_id)
    box.status.conditions.add(type="Ready", reason=phase)
    return box


def pending_none(_: set[str]) -> list[pb.DriverSandbox]:
    return []


async def served_fanout() -> Fanout:
    fanout = Fanout(asyncio.Event(), pending_none)
    fanout.serve()
    return fanout


async def drained(stream: Stream, count: int) -> list[pb.WatchSandboxesEvent]:
    got = []
    for _ in range(count):
        item = await asyncio.wait_for(stream.get(), 5.0)
        assert isinstance(item, pb.WatchSandboxesEvent)
        got.append(item)
    return got


def test_new_streams_share_the_told_events_and_keys() -> None:
    async def run() -> None:
        fanout = await served_fanout()
        events = [sandbox_event(snap(f"sb-{i}")) for i in range(3)]
        for event in events:
            fanout.emit(event)
        first, second = Stream(100), Stream(100)
        fanout.add(first)
        fanout.add(second)
        a, b = await drained(first, 3), await drained(second, 3)
        assert all(x is y is e for x, y, e in zip(a, b, events, strict=True))
        for i in range(3):
            assert first.seen[f"sb-{i}"] is second.seen[f"sb-{i}"] is fanout.said[f"sb-{i}"][1][1]

    asyncio.run(run())


def test_an_emitted_event_is_keyed_once_for_every_stream() -> None:
    async def run() -> None:
        fanout = await served_fanout()
        streams = [Stream(100) for _ in range(3)]
        for stream in streams:
            fanout.add(stream)
        event = sandbox_event(snap("sb-x"))
        fanout.emit(event)
        values = [s.seen["sb-x"] for s in streams]
        assert all(v is values[0] for v in values)
        assert [await drained(s, 1) for s in streams] == [[event]] * 3
        fanout.emit(sandbox_event(snap("sb-x")))  # a repeat: told again to nobody
        assert all(not s._items for s in streams)

    asyncio.run(run())


def test_a_deleted_or_forgotten_sandbox_is_not_given_to_a_new_stream() -> None:
    async def run() -> None:
        fanout = await served_fanout()
        fanout.emit(sandbox_event(snap("sb-gone")))
        fanout.emit(sandbox_event(snap("sb-kept")))
        fanout.emit(deleted_event("sb-gone"))
        assert set(fanout.said) == set(fanout.told) == {"sb-kept"}
        stream = Stream(100)
        fanout.add(stream)
        [only] = await drained(stream, 1)
        assert only.sandbox.sandbox.id == "sb-kept" and not stream._items
        fanout.forget()
        assert not fanout.said and not fanout.told

    asyncio.run(run())
