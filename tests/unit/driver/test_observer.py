"""Unit tests for podmand.driver.observer: when an exit happened before podmand watched."""

from __future__ import annotations

import asyncio

from podmand.config import Settings
from podmand.driver import observer
from tests.fakes.harness import driver_on

SINCE = 1_795_972_800.5  # 2026-11-29T17:20:00.5Z


def test_ended_before_keeps_sub_second_precision() -> None:
    """An exit in the same second podmand started watching is only 'unwatched' if it
    really came first: whole seconds would misjudge a restart that fast."""
    assert observer.ended_before("2026-11-29T17:20:00.400000000Z", SINCE) is True
    assert observer.ended_before("2026-11-29T17:20:00.600000000Z", SINCE) is False
    assert observer.ended_before("2026-11-29T18:20:00.4+01:00", SINCE) is True
    assert observer.ended_before("0001-01-01T00:00:00Z", SINCE) is False
    assert observer.ended_before("", SINCE) is False


def test_listed_before_trusts_only_an_earlier_second() -> None:
    assert observer.listed_before(1_795_972_799, SINCE) is True
    assert observer.listed_before(1_795_972_800, SINCE) is False  # the start second itself: unknown
    assert observer.listed_before(0, SINCE) is False


def test_the_inspected_verdict_wins_over_the_list_guess_within_the_start_second() -> None:
    """The list endpoint has whole seconds only; a verdict from an earlier inspect wins."""

    async def main() -> tuple[str, str]:
        async with driver_on(lambda _t: Settings()) as rig:
            obs = rig.driver.observer
            obs.watching_since = SINCE
            cid = rig.boxes.add("sb-1", "exited", exit_code=143, finished_at="2026-11-29T17:20:00.400000000Z")
            guessed = (await rig.driver.list_sandboxes())[0].status.conditions[0].message
            await obs.observe(cid)
            told = (await rig.driver.list_sandboxes())[0].status.conditions[0].message
            return guessed, told

    guessed, told = asyncio.run(asyncio.wait_for(main(), 30))
    assert "podmand was not running" not in guessed
    assert "podmand was not running" in told
