"""The hub and a real Driver wired as podmand wires them (one Inbox: the driver's
sink, the hub's input), in-process on a fake libpod.  The hub's run loop is not
started: each test hands it the inbox messages the loop would take."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.driver import Driver
from podmand.driver.observer import changes_state
from podmand.libpod import Event, EventActor
from podmand.watch.hub import Hub
from podmand.watch.inbox import Inbox, PodmanEvent, Publish, Refresh
from podmand.watch.streams import End, Stream
from tests.fakes.harness import Rig, driver_on, eventually, labels_for, settle
from tests.jwt import make_launch

DEADLINE = 30.0
GENERATION = "g0000000000000001"


def run(body: Callable[[Rig, Hub, Inbox], Awaitable[None]], settings: Callable[[Path], Settings] | None = None) -> None:
    async def main() -> None:
        inbox = Inbox()
        async with driver_on(settings or (lambda _tmp: Settings()), sink=inbox) as rig:
            hub = Hub(rig.driver.podman, rig.driver, inbox, resync=0)
            await body(rig, hub, inbox)

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


async def connect(hub: Hub, inbox: Inbox) -> None:
    """What the hub does on connecting: one list, a look at every container."""
    hub._list(first=True)
    await settle(hub, inbox)
    assert hub.connected.is_set()


async def drain(hub: Hub, inbox: Inbox) -> None:
    if not hub.connected.is_set():
        await connect(hub, inbox)
    await settle(hub, inbox)


def podman_event(action: str, cid: str, attributes: dict[str, str]) -> Event:
    """Podman's event, with the container's name (Podman adds it to the labels) as
    podmand names the container of those labels."""
    name = names.container_name(
        attributes.get(names.SANDBOX_WORKSPACE, ""),
        attributes.get(names.SANDBOX_NAME, ""),
        attributes.get(names.SANDBOX_ID, ""),
    )
    attributes = {"name": name, **attributes}
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


async def watching_one(rig: Rig, hub: Hub, inbox: Inbox, sandbox_id: str) -> tuple[str, Stream]:
    """A running sandbox's container and a stream that has had its first snapshot."""
    cid = rig.boxes.add(sandbox_id)
    await connect(hub, inbox)
    stream = await hub.subscribe()
    await drain(hub, inbox)
    assert await take(stream, 1) == [("sandbox", sandbox_id, "ContainerRunning")]
    return cid, stream


def test_a_died_event_gives_the_snapshot_and_one_platform_event() -> None:
    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid, stream = await watching_one(rig, hub, inbox, "sb-1")
        rig.boxes.end(cid, 137)
        for action in ("died", "cleanup"):  # Podman sends both; the second changes nothing
            inbox.put(PodmanEvent(podman_event(action, cid, labels_for("sb-1"))))
        await drain(hub, inbox)
        assert await take(stream, 2) == [  # the look announces the end as it finds it, then reports it
            ("platform", "sb-1", "ContainerRuntimeRestart"),
            ("sandbox", "sb-1", "ContainerRuntimeRestart"),
        ]
        inbox.put(Publish(pb.WatchSandboxesEvent(deleted=pb.WatchSandboxesDeletedEvent(sandbox_id="marker"))))
        await drain(hub, inbox)
        assert await take(stream, 1) == [("deleted", "marker")]  # nothing else came before it

    run(body)


def test_the_driver_tells_the_hub_through_typed_messages() -> None:
    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid = rig.boxes.add_pair("sb-1", "exited")
        rig.driver.files.mark_stopped("sb-1", cid)
        await rig.driver.start("sb-1", launch_authentication=make_launch("sb-1", GENERATION))
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
    impostor = Event(Type="container", Action="died",  # an image reader whose image bears the victim's labels
                     Actor=EventActor(id="c", attributes={**labels, "name": "podmand-read-1-abc"}))
    assert not changes_state(impostor)

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid = rig.boxes.add("sb-1")
        await connect(hub, inbox)
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
    """Removed out of band: the index still knew the container, so its sandbox is
    cleaned up and Deleted is sent, without an inspect of what Podman said it removed."""

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid = rig.boxes.add("sb-1")
        await connect(hub, inbox)
        stream = await hub.subscribe()
        await drain(hub, inbox)
        await take(stream, 1)
        del rig.boxes.boxes[cid]
        inspects = rig.fake.count(f"GET .*/containers/{cid}/json")
        inbox.put(PodmanEvent(podman_event("remove", cid, labels_for("sb-1"))))
        await drain(hub, inbox)
        assert await take(stream, 1) == [("deleted", "sb-1")]
        assert rig.fake.count(f"GET .*/containers/{cid}/json") == inspects
        assert len(rig.driver.locks) == 0 and len(rig.driver.observer) == 0 and len(rig.driver.index) == 0

    run(body)


def test_sandbox_lookups_cost_one_inspect_once_the_hub_has_listed() -> None:
    """Get, Stop and Start find the container through the index: one inspect, never
    the label-filtered list that reads every container in Podman."""

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cids = [rig.boxes.add_pair(f"sb-{i}") for i in range(20)]
        await connect(hub, inbox)
        lists = rig.fake.count("GET .*/containers/json")
        inspects = rig.fake.count(f"GET .*/containers/{cids[7]}/json")
        assert (await rig.driver.get("sb-7")).id == "sb-7"
        assert rig.fake.count(f"GET .*/containers/{cids[7]}/json") == inspects + 1
        await rig.driver.stop("sb-7")
        await rig.driver.start("sb-7", launch_authentication=make_launch("sb-7", GENERATION))
        assert rig.boxes.boxes[cids[7]]["State"]["Status"] == "running"
        assert rig.fake.count("GET .*/containers/json") == lists  # no list at all

    run(body)


def test_deletes_cost_no_list_and_their_remove_events_no_podman_call() -> None:
    """Deleting N sandboxes is linear: each finds its container in the index, and the
    remove event that follows finds the sandbox forgotten already (Deleted was sent)."""

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cids = [rig.boxes.add(f"sb-{i}", workspace="") for i in range(10)]
        await connect(hub, inbox)
        stream = await hub.subscribe()
        await drain(hub, inbox)
        await take(stream, 10)
        lists = rig.fake.count("GET .*/containers/json")
        for i, cid in enumerate(cids[:9]):
            assert await rig.driver.delete(f"sb-{i}")
            inbox.put(PodmanEvent(podman_event("remove", cid, labels_for(f"sb-{i}", ""))))
        calls = len(rig.fake.requests)
        await drain(hub, inbox)
        assert len(rig.fake.requests) == calls  # the remove events asked Podman nothing
        assert await take(stream, 9) == [("deleted", f"sb-{i}") for i in range(9)]
        assert rig.fake.count("GET .*/containers/json") == lists

    run(body)


def test_exits_come_from_events_and_a_wait_per_container_only_when_asked() -> None:
    """By default no /wait is held open (Podman 4.x polls each one every 250 ms);
    ``exit_watch = "wait"`` brings it back: a container running since before the hub
    connected gets its waiter on connecting, with no stream open and no RPC asked."""

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        rig.boxes.add("sb-1")
        await connect(hub, inbox)
        waits = rig.boxes.waits.opened
        if rig.driver.settings.exit_watch == "wait":
            await eventually(lambda: rig.boxes.waits.opened == 1, "the exit waiter's /wait")
        else:
            assert waits == 0 and rig.fake.count("/wait") == 0

    run(body)
    run(body, lambda _tmp: Settings(exit_watch="wait"))


def test_forgetting_a_removed_container_drops_its_facts_and_a_second_deleted_is_not_claimed() -> None:
    """A look that inspected a container being deleted cached its facts; the remove event
    that follows drops them. With the index not loaded (reconnecting), a late look at a
    container DeleteSandbox already removed finds nothing and claims no second Deleted."""

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid = rig.boxes.add("sb-1")
        await connect(hub, inbox)
        assert len(rig.driver.observer) == 1  # the look cached its facts
        rig.driver.removal.deleting.add("sb-1")  # a DeleteSandbox is removing it (and said so)
        del rig.boxes.boxes[cid]
        assert await rig.driver.forget("sb-1", cid) is False  # the remove event's look
        assert len(rig.driver.observer) == 0 and len(rig.driver.index) == 0
        rig.driver.removal.deleting.discard("sb-1")
        rig.driver.unwatched()
        calls = len(rig.fake.requests)
        assert await rig.driver.forget("sb-1", cid) is False  # found nothing of it: no second Deleted
        assert len(rig.fake.requests) > calls  # it did look (the index could not say)

    run(body)


def test_a_restarted_hub_serves_from_one_list_and_a_look_that_agrees_tells_nothing() -> None:
    """A second driver and hub on the same state directory (a restart): connected after one
    list with every inspect held; the stream's first snapshots come from the list (the exit
    code, the fence evidence kept by the first run); once the inspects answer, only the
    OOM kill the list could not show is told again."""

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        rig.boxes.add("sb-run")
        rig.boxes.add("sb-exit", "exited", exit_code=3, finished_at="2026-11-29T17:05:00Z")
        oom = rig.boxes.add("sb-oom", "exited", exit_code=137, finished_at="2026-11-29T17:05:00Z")
        await connect(hub, inbox)  # the first run looks at each (and keeps its fence evidence)
        before = {s: hub.fanout.told[s] for s in ("sb-run", "sb-exit")}
        rig.boxes.boxes[oom]["State"]["OOMKilled"] = True  # what only an inspect shows

        held = asyncio.Event()

        async def slow(req: Any) -> Any:
            await held.wait()
            return rig.boxes._inspect(req)

        rig.fake.route("GET", "/containers/(?P<c>[^/]+)/json", slow)
        inbox2 = Inbox()
        driver2 = Driver(rig.driver.settings, rig.driver.podman, rig.driver.state_dir, inbox2)
        hub2 = Hub(rig.driver.podman, driver2, inbox2, resync=0)
        hub2._list(first=True)
        listed = await eventually(inbox2.get_nowait, "the list's answer")
        hub2._handle(listed)
        assert hub2.connected.is_set() and len(hub2.looks.in_flight()) == 3  # no inspect answered
        stream = await hub2.subscribe()
        hub2._handle(inbox2.get_nowait())  # type: ignore[arg-type]
        first = {}
        for _ in range(3):
            item = await stream.get()
            assert not isinstance(item, End)
            first[item.sandbox.sandbox.id] = item.sandbox.sandbox
        assert first["sb-run"] == before["sb-run"] and first["sb-exit"] == before["sb-exit"]
        assert first["sb-exit"].status.conditions[0].message == "Container exited with code 3"
        assert first["sb-run"].status.fence_evidence.evidence_digest
        assert first["sb-oom"].status.conditions[0].reason == "ContainerRuntimeRestart"
        held.set()
        await settle(hub2, inbox2)
        inbox2.put(Publish(pb.WatchSandboxesEvent(deleted=pb.WatchSandboxesDeletedEvent(sandbox_id="marker"))))
        await settle(hub2, inbox2)
        after: list[tuple[str, ...]] = []
        while not after or after[-1] != ("deleted", "marker"):
            after += await take(stream, 1)
        # the looks announce the abnormal ends (as every start does); of the snapshots, only the OOM kill is new
        assert [d for d in after if d[0] != "platform"] == [("sandbox", "sb-oom", "OOMKilled"), ("deleted", "marker")]
        await driver2.close()

    run(body)


def test_a_create_makes_one_container_inspect_whenever_podmans_events_of_it_come() -> None:
    """A create's inspect of the workload by its ID: one (provisioning's look after the
    start; the pair's own calls name it). Podman's create, init and start events of it,
    handled after provisioning ended (the event stream is late), cost no look of their own."""

    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        await connect(hub, inbox)
        before = time.time_ns()
        sandbox = pb.DriverSandbox(id="sb-1", name="demo", workspace="ws", spec=pb.DriverSandboxSpec(
            template=pb.DriverSandboxTemplate(image="docker.io/library/alpine:3.20"),
            launch_authentication=make_launch("sb-1", GENERATION)))
        await rig.driver.create(sandbox)
        await eventually(lambda: rig.driver.provisioning.get("sb-1") is None, "the end of provisioning")
        cid = rig.boxes.of("sb-1")
        labels = rig.boxes.boxes[cid]["Config"]["Labels"]
        await drain(hub, inbox)  # provisioning's look
        made = len(rig.fake.requests)
        for action in ("create", "init", "start"):
            event = podman_event(action, cid, labels)
            event.timeNano = before
            inbox.put(PodmanEvent(event))
        await drain(hub, inbox)
        calls = [r.split("?")[0].rsplit("/libpod", 1)[-1] for r in rig.fake.requests if cid in r]
        assert calls == [f"/containers/{cid}/json"]
        assert len(rig.fake.requests) == made  # the events asked Podman nothing

    run(body)
