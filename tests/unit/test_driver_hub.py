"""The hub and a real Driver wired as podmand wires them (one Inbox: the driver's
sink, the hub's input), in-process on a fake libpod.  The hub's run loop is not
started: each test hands it the inbox messages the loop would take."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.driver.observer import changes_state
from podmand.hub import End, Hub, Inbox, Lost, PodmanEvent, Publish, Refresh, Stream
from podmand.libpod import Event, EventActor
from tests.fakes.harness import Rig, driver_on, eventually, labels_for

DEADLINE = 30.0


def run(body: Callable[[Rig, Hub, Inbox], Awaitable[None]]) -> None:
    async def main() -> None:
        inbox = Inbox()
        async with driver_on(sink=inbox) as rig:
            hub = Hub(rig.driver.podman, rig.driver, inbox, resync=0)
            hub.connected.set()
            await body(rig, hub, inbox)

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


async def drain(hub: Hub, inbox: Inbox) -> None:
    while (message := inbox.get_nowait()) is not None:
        assert not isinstance(message, Lost)
        await hub._handle(message)


def podman_event(action: str, cid: str, attributes: dict[str, str]) -> Event:
    return Event(Type="container", Action=action, Actor=EventActor(id=cid, attributes=attributes))


def describe(item: pb.WatchSandboxesEvent | End) -> tuple[str, ...]:
    assert not isinstance(item, End)
    kind = item.WhichOneof("payload")
    if kind == "sandbox":
        return ("sandbox", item.sandbox.sandbox.id, item.sandbox.sandbox.status.conditions[0].reason)
    if kind == "deleted":
        return ("deleted", item.deleted.sandbox_id)
    return ("platform", item.platform_event.sandbox_id, item.platform_event.event.reason)


async def take(stream: Stream, n: int) -> list[tuple[str, ...]]:
    return [describe(await stream.get()) for _ in range(n)]


def test_a_died_event_gives_the_snapshot_and_one_platform_event() -> None:
    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid = rig.boxes.add("sb-1")
        stream = await hub.subscribe()
        await drain(hub, inbox)
        assert await take(stream, 1) == [("sandbox", "sb-1", "ContainerRunning")]
        rig.boxes.end(cid, 137)
        for action in ("died", "cleanup"):  # Podman sends both; the second changes nothing
            inbox.put(PodmanEvent(podman_event(action, cid, labels_for("sb-1"))))
        await drain(hub, inbox)
        assert await take(stream, 2) == [
            ("sandbox", "sb-1", "ContainerRuntimeRestart"),
            ("platform", "sb-1", "ContainerRuntimeRestart"),
        ]
        inbox.put(Publish(pb.WatchSandboxesEvent(deleted=pb.WatchSandboxesDeletedEvent(sandbox_id="marker"))))
        await drain(hub, inbox)
        assert await take(stream, 1) == [("deleted", "marker")]  # nothing else came before it

    run(body)


def test_the_driver_tells_the_hub_through_typed_messages() -> None:
    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid = rig.boxes.add("sb-1", "exited", exit_code=0, finished_at="2026-11-29T17:05:00Z")
        rig.driver.files.mark_stopped("sb-1", cid)
        await rig.driver.start("sb-1")
        assert inbox.get_nowait() == Refresh(cid, "sb-1") and inbox.get_nowait() is None
        assert await rig.driver.delete("sb-1")
        message = inbox.get_nowait()
        assert isinstance(message, Publish) and message.event.deleted.sandbox_id == "sb-1"

    run(body)


def test_events_that_change_no_sandbox_state_are_not_observed() -> None:
    labels = labels_for("sb-1")
    assert changes_state(podman_event("died", "c", labels))
    assert changes_state(podman_event("health_status", "c", labels))
    assert not changes_state(podman_event("exec_died", "c", labels))
    assert not changes_state(podman_event("died", "c", {**labels, names.OWNER: "someone-else"}))
    assert not changes_state(podman_event("died", "c", {k: v for k, v in labels.items() if k != names.SANDBOX_ID}))

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid = rig.boxes.add("sb-1")
        stream = await hub.subscribe()
        await drain(hub, inbox)
        await take(stream, 1)
        rig.boxes.end(cid, 1)
        before = rig.fake.count(f"GET .*/containers/{cid}/json")
        inbox.put(PodmanEvent(podman_event("exec_died", cid, labels)))
        await drain(hub, inbox)
        assert rig.fake.count(f"GET .*/containers/{cid}/json") == before  # not even inspected

    run(body)


def test_a_vanished_container_becomes_deleted_once_forgotten() -> None:
    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid = rig.boxes.add("sb-1")
        stream = await hub.subscribe()
        await drain(hub, inbox)
        await take(stream, 1)
        del rig.boxes.boxes[cid]
        inbox.put(PodmanEvent(podman_event("remove", cid, labels_for("sb-1"))))
        await drain(hub, inbox)
        assert await take(stream, 1) == [("deleted", "sb-1")]
        assert len(rig.driver.locks) == 0 and len(rig.driver.observer) == 0

    run(body)


def test_on_connecting_the_hub_looks_at_every_sandbox_so_exits_are_watched() -> None:
    """A container running since before podmand (re)subscribed gets its exit waiter as
    soon as the hub connects, with no watch stream open and no RPC asked."""

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        rig.boxes.add("sb-1")
        hub.connected.clear()
        running = asyncio.ensure_future(hub.run())
        try:
            await eventually(lambda: rig.boxes.waits.opened == 1, "the exit waiter's /wait")
        finally:
            hub.close()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)

    run(body)
