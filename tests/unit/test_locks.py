"""Per-sandbox locks: mutual exclusion while used, nothing kept once unused
(issue 9, finding 8: 1 500 requests with unknown ids grew podmand by 17 MB)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest

from podmand.config import Settings
from podmand.driver import Driver
from podmand.errors import NotFound
from podmand.libpod import PodmanClient
from podmand.locks import LockTable
from tests.fakes.harness import Sink
from tests.fakes.libpod import FakeLibpod
from tests.jwt import make_launch

GENERATION = "g0000000000000001"

DEADLINE = 30.0


def test_lock_excludes_and_its_entry_goes_with_the_last_waiter() -> None:
    async def main() -> None:
        table = LockTable()
        order: list[str] = []
        gate = asyncio.Event()

        async def user(name: str) -> None:
            async with table["k"]:
                order.append(f"{name}+")
                await gate.wait()
                order.append(f"{name}-")

        tasks = [asyncio.create_task(user(n)) for n in "abc"]
        while len(order) < 1:
            await asyncio.sleep(0)
        assert len(table) == 1 and table.locked("k")
        gate.set()
        await asyncio.gather(*tasks)
        assert order == ["a+", "a-", "b+", "b-", "c+", "c-"]  # never two inside at once
        assert len(table) == 0 and not table.locked("k")

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


def test_cancelled_waiter_and_failing_holder_leave_no_entry() -> None:
    async def main() -> None:
        table = LockTable()
        held = asyncio.Event()
        release = asyncio.Event()

        async def holder() -> None:
            async with table["k"]:
                held.set()
                await release.wait()
                raise RuntimeError("boom")

        async def waiter() -> None:
            async with table["k"]:
                raise AssertionError("a cancelled waiter never gets the lock")

        first = asyncio.create_task(holder())
        await held.wait()
        second = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        assert len(table) == 1  # the holder still has it
        release.set()
        with pytest.raises(RuntimeError):
            await first
        assert len(table) == 0

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


def test_unknown_ids_leave_the_driver_lock_table_empty() -> None:
    """1 500 Stop/Start/Delete with ids nobody created (a fuzzing client) keep no lock."""

    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="pdl-", dir="/tmp") as tmp:
            fake = FakeLibpod()
            await fake.start(f"{tmp}/podman.sock")
            podman = PodmanClient(fake.path)
            driver = Driver(Settings(), podman, Path(tmp) / "state", Sink())
            driver.files.setup()
            try:
                for i in range(500):
                    sandbox_id = f"unknown-{i}"
                    with pytest.raises(NotFound):
                        await driver.stop(sandbox_id)
                    with pytest.raises(NotFound):
                        await driver.start(sandbox_id, launch_authentication=make_launch(sandbox_id, GENERATION))
                    assert await driver.delete(sandbox_id) is False
                assert len(driver.locks) == 0
                assert not any((Path(tmp) / "state" / "sandboxes").iterdir())
            finally:
                await podman.close()
                await fake.close()

    asyncio.run(asyncio.wait_for(main(), 120))
