"""Unit tests for podmand.watch.liveness: Podman's reachability as the health service reports it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from podmand.watch.liveness import Liveness

DEADLINE = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_serving_through_the_grace_period_then_not() -> None:
    clock = Clock()
    live = Liveness(15.0, clock)
    assert live.serving()
    live.down()
    clock.now += 14.9
    assert live.serving()
    clock.now += 0.1
    assert not live.serving()
    live.down()  # another failed attempt does not restart the grace period
    assert not live.serving()
    live.up()
    assert live.serving()


def test_return_is_logged_once_with_the_outage_length(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    live = Liveness(15.0, clock)
    caplog.set_level(logging.INFO, "podmand")
    live.up()  # already up: nothing to say
    live.down()
    clock.now += 42.4
    live.up()
    live.up()
    assert [r.getMessage() for r in caplog.records] == ["Podman is reachable again after 42 s"]


async def wait_for(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not predicate():
            await asyncio.sleep(0.01)


def test_run_publishes_each_change_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    """NOT_SERVING once the grace period has passed, SERVING again at the return;
    one WARNING for each change to NOT_SERVING."""
    caplog.set_level(logging.INFO, "podmand")
    published: list[bool] = []

    async def publish(serving: bool) -> None:
        published.append(serving)

    async def main() -> None:
        live = Liveness(0.05)
        task = asyncio.create_task(live.run(publish))
        try:
            await asyncio.sleep(0)
            assert published == []  # starts serving: nothing to publish
            live.down()
            live.down()
            await wait_for(lambda: published == [False])
            live.up()
            await wait_for(lambda: published == [False, True])
            live.down()
            live.up()  # back within the grace period: SERVING all along
            assert live.serving()
            live.down()
            await wait_for(lambda: published == [False, True, False])
        finally:
            task.cancel()

    asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("health is NOT_SERVING" in w for w in warnings), warnings
    assert sum("reachable again" in r.getMessage() for r in caplog.records) == 2


def test_zero_grace_means_not_serving_at_once() -> None:
    published: list[bool] = []

    async def publish(serving: bool) -> None:
        published.append(serving)

    async def main() -> None:
        live = Liveness(0.0)
        task = asyncio.create_task(live.run(publish))
        try:
            live.down()
            await wait_for(lambda: published == [False])
            assert not live.serving()
        finally:
            task.cancel()

    asyncio.run(main())
