"""The observer's rule for a pair missing a half (contract §4.6: no workload runs without its
supervisor), on the fake libpod's pair model: it stops this podmand's workload whose
supervisor is gone, and leaves alone the pair of another podmand sharing the same Podman (this
state directory has no generation of it: that podmand may be making it right now, workload first)."""

from __future__ import annotations

import asyncio

from podmand import names
from podmand.driver import pairs
from tests.fakes.harness import Rig, driver_on, eventually


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

