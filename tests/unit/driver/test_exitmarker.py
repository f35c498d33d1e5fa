"""The early-SIGTERM line of an exited workload's log in its ContainerExited message (contract
§4.6, driver/exitmarker.py), on the fake libpod: appended when the log's tail has it, read once
per end, never more than a bound of a tenant's output kept."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

from podmand import names
from podmand.driver import exitmarker
from tests.fakes.harness import Rig, driver_on

LINE = b"openshell-sandbox: sandbox boundary received SIGTERM before supervisor confirmation\n"


def framed(*lines: bytes) -> bytes:
    """Podman's log body: each line a frame ``[stream, 0, 0, 0, size32be]`` + payload (stderr)."""
    return b"".join(struct.pack(">BxxxI", 2, len(line)) + line for line in lines)


def exited_pair(rig: Rig, log: bytes) -> tuple[str, list[str]]:
    """sb-1's workload, ended with code 1, its log ``log``; the log reads Podman was asked for."""
    workload = rig.boxes.add_pair("sb-1", "exited")
    rig.boxes.boxes[workload]["State"]["ExitCode"] = 1
    rig.driver.files.set_generation("sb-1", "g0000000000000001")
    reads: list[str] = []

    def answer(req: object) -> tuple[int, dict[str, str], bytes]:
        reads.append(str(req))
        return 200, {"Content-Type": "application/octet-stream"}, log

    rig.fake.route("GET", f"/containers/{workload}/logs", answer)
    return workload, reads


def run(body: Callable[[Rig], Awaitable[None]]) -> None:
    async def main() -> None:
        async with driver_on() as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_an_exit_before_confirmation_says_so_and_the_log_is_read_once_per_end() -> None:
    async def body(rig: Rig) -> None:
        workload, reads = exited_pair(rig, framed(b"openshell-sandbox: listening\n", LINE))
        for _ in range(2):
            ready = (await rig.driver.get("sb-1")).status.conditions[0]
            assert (ready.reason, ready.message) == ("ContainerExited", "Container exited with code 1: sandbox "
                                                     "boundary received SIGTERM before supervisor confirmation")
        assert len(reads) == 1
        rig.boxes.boxes[workload]["State"]["FinishedAt"] = "2026-12-01T00:00:00Z"  # another run ended
        await rig.driver.get("sb-1")
        assert len(reads) == 2

    run(body)


def test_an_ordinary_exit_keeps_its_message() -> None:
    async def body(rig: Rig) -> None:
        exited_pair(rig, framed(b"main process: exit 1\n"))
        ready = (await rig.driver.get("sb-1")).status.conditions[0]
        assert ready.message == "Container exited with code 1"

    run(body)


def test_only_the_end_of_a_long_tail_is_kept() -> None:
    """A tenant's huge lines cost at most MAX_BYTES: the marker at the end is found, one
    written before the last MAX_BYTES of the tail is not kept (nor the memory it took)."""
    big = b"x" * (exitmarker.MAX_BYTES + 1024) + b"\n"

    async def body(rig: Rig) -> None:
        exited_pair(rig, framed(big, LINE))
        assert (await rig.driver.get("sb-1")).status.conditions[0].message.endswith("confirmation")
        rig.boxes.boxes[rig.boxes.of("sb-1")]["State"]["FinishedAt"] = "2026-12-01T00:00:00Z"
        rig.fake.route("GET", f"/containers/{rig.boxes.of('sb-1')}/logs", (200, {}, framed(LINE, big)))
        assert (await rig.driver.get("sb-1")).status.conditions[0].message == "Container exited with code 1"

    run(body)


def test_a_supervisor_is_never_read() -> None:
    async def body(rig: Rig) -> None:
        _, reads = exited_pair(rig, framed(LINE))
        supervisor = rig.boxes.of("sb-1", names.ROLE_SUPERVISOR)
        await rig.driver.observe(supervisor)
        assert reads == []

    run(body)
