"""What a podmand does to another podmand's sandboxes on the same Podman, on the fake libpod's
pair model: nothing. The observer's rule for a pair missing a half (contract §4.6: no workload
runs without its supervisor) stops this podmand's workload whose supervisor is gone, and leaves
alone another's pair (this state directory has no generation of it: that podmand may be making
it right now, workload first); a sandbox gone from Podman is cleaned up only by its own podmand."""

from __future__ import annotations

import asyncio

from podmand import names
from podmand.driver import pairs
from tests.fakes.harness import Rig, driver_on, eventually
from tests.jwt import make_launch


def test_only_this_podmands_orphaned_workload_is_stopped() -> None:
    async def body(rig: Rig) -> None:
        ours, theirs = rig.boxes.add_pair("sb-ours"), rig.boxes.add_pair("sb-theirs")
        for sandbox_id in ("sb-ours", "sb-theirs"):
            del rig.boxes.boxes[rig.boxes.of(sandbox_id, names.ROLE_SUPERVISOR)]  # its supervisor is gone
        rig.driver.files.set_generation("sb-ours", "g0000000000000001")  # made here; sb-theirs elsewhere
        for cid in (ours, theirs):
            await rig.driver.observe(cid)
        await eventually(lambda: pairs.SUPERVISOR_GONE in rig.sink.reasons(), "the SupervisorExited event")
        await eventually(lambda: not rig.boxes.boxes[ours]["State"]["Running"], "our workload stopped")
        await asyncio.sleep(0)  # the other's task, had one been started, had its turn too
        assert rig.boxes.boxes[theirs]["State"]["Running"]
        assert [e for e in rig.sink.events if e.WhichOneof("payload") == "platform_event"
                and e.platform_event.sandbox_id == "sb-theirs"] == []

    async def main() -> None:
        async with driver_on() as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_supervisor_made_and_never_started_beside_its_running_workload_is_started() -> None:
    """A podmand killed between the pair's two starts: the next one, observing the workload,
    starts the supervisor (its files were uploaded before either start), as the start would have."""
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add_pair("sb-ours")
        rig.boxes.boxes[rig.boxes.of("sb-ours", names.ROLE_SUPERVISOR)]["State"].update(Status="created", Running=False)
        rig.driver.files.set_generation("sb-ours", "g0000000000000001")
        await rig.driver.observe(cid)
        sup = rig.boxes.of("sb-ours", names.ROLE_SUPERVISOR)
        await eventually(lambda: rig.boxes.boxes[sup]["State"]["Running"], "the supervisor started")

    async def main() -> None:
        async with driver_on() as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_pair_whose_create_is_unfinished_is_left_to_the_resume() -> None:
    """A podmand killed mid-create left a running workload whose supervisor it had not made (or
    had removed as a leftover): its launch bundle still in the state directory, the next podmand's
    resume finishes that create. A look before the resume took it up stops nothing (it did, and
    the resumed sandbox ended as ContainerRuntimeRestart), and neither does a resync's."""
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add_pair("sb-ours")
        del rig.boxes.boxes[rig.boxes.of("sb-ours", names.ROLE_SUPERVISOR)]
        rig.driver.files.write_launch("sb-ours", make_launch("sb-ours", "g0000000000000001"))
        await rig.driver.observe(cid)
        [entry] = [e for e in await rig.driver.listed() if e.id == cid]
        assert rig.driver.changed(entry) is False
        rig.driver.files.drop_launch("sb-ours")  # the create finished: its pair is this podmand's to mend
        rig.driver.files.set_generation("sb-ours", "g0000000000000001")
        assert rig.driver.changed(entry) is True
        assert rig.boxes.boxes[cid]["State"]["Running"] and pairs.SUPERVISOR_GONE not in rig.sink.reasons()

    async def main() -> None:
        async with driver_on() as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_another_podmands_sandbox_gone_from_podman_is_not_cleaned_up_here() -> None:
    """A resync that no longer lists another podmand's sandbox (its containers removed) tells
    the streams it is gone, and removes nothing of it: its record volume names that podmand's
    state directory, whose sandbox it is to clean up (seen: one test session's podmand removed
    the volumes of another's stopped sandbox)."""
    async def body(rig: Rig) -> None:
        rig.fake.route("GET", "/volumes/[^/]+/json", (200, {}, {
            "Name": names.volume_name("sb-theirs"),
            "Labels": {names.OWNER: names.OWNER_VALUE, names.STATE_DIR: "/elsewhere/state"}}))
        before = len(rig.fake.requests)
        assert await rig.driver.forget("sb-theirs") is True
        assert not [r for r in list(rig.fake.requests)[before:] if r.startswith("DELETE")]

    async def main() -> None:
        async with driver_on() as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))
