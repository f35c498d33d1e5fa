"""podmand's own run of a supervisor's health check (observer._probe, for Podmans without
systemd's timers), on the fake libpod: a check Podman could not run once (a 500 under load)
is run again, not the end of probing; a stopped or removed container ends it."""

from __future__ import annotations

import asyncio

import pytest

from podmand import names
from podmand.config import Settings
from tests.fakes.harness import Rig, driver_on, eventually
from tests.fakes.libpod import Request

CHECKED = lambda _tmp: Settings(health_check_interval=1)  # noqa: E731


def probe(rig: Rig, answers: list[tuple[int, dict[str, str], object]]) -> tuple[str, str, list[str]]:
    """A running pair whose supervisor has a check answered by ``answers`` in turn (the last
    repeats): the workload, the supervisor and the checks Podman was asked for."""
    workload = rig.boxes.add_pair("sb-1")
    supervisor = rig.boxes.of("sb-1", names.ROLE_SUPERVISOR)
    rig.boxes.boxes[supervisor]["Config"]["Healthcheck"] = {"Test": ["CMD", "/openshell-supervisor", "health"]}
    rig.driver.files.set_generation("sb-1", "g0000000000000001")
    asked: list[str] = []

    def answer(req: Request) -> tuple[int, dict[str, str], object]:
        asked.append(req.path)
        return answers[min(len(asked), len(answers)) - 1]

    rig.fake.route("GET", f"/containers/{supervisor}/healthcheck", answer)
    return workload, supervisor, asked


def test_a_check_podman_could_not_run_once_is_run_again() -> None:
    async def body(rig: Rig) -> None:
        failed = (500, {}, {"cause": "exec failed", "message": "exec session exited: timed out", "response": 500})
        workload, _, asked = probe(rig, [failed, (200, {}, {"Status": "healthy", "FailingStreak": 0, "Log": []})])
        await rig.driver.observe(workload)
        await eventually(lambda: (workload, "sb-1") in rig.sink.refreshes, "a look after the check passed")
        assert len(asked) >= 2

    async def main() -> None:
        async with driver_on(CHECKED) as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize("end", [
    (409, {}, {"cause": "container is not running", "message": "container is stopped", "response": 409}),
    (404, {}, {"cause": "no such container", "message": "no such container", "response": 404}),
], ids=["stopped", "removed"])
def test_a_stopped_or_removed_supervisor_ends_probing(end: tuple[int, dict[str, str], object]) -> None:
    async def body(rig: Rig) -> None:
        workload, supervisor, asked = probe(rig, [end])
        await rig.driver.observe(workload)
        await eventually(lambda: asked and ("probe", supervisor) not in rig.driver.tasks, "probing ended")
        assert len(asked) == 1 and rig.sink.refreshes == []

    async def main() -> None:
        async with driver_on(CHECKED) as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_check_cut_short_by_a_stop_is_neither_passed_nor_starting() -> None:
    """Podman 5.5 and later answer a check its container's stop cut short with 200 and the
    status "stopped" (libpod/healthcheck.go:160-161, 387-388 at v6.0.0-rc1), which the
    container's inspect then reads too until its next start. The probe's answer asks
    for a look and the next check (409: stopped) ends probing; a supervisor still read as
    running with that status makes the sandbox HealthCheckStopped, Ready Unknown (it was
    ContainerRunning, Ready True: a status podmand did not know left the workload's own),
    and podmand does not stop the workload for it."""
    async def body(rig: Rig) -> None:
        stopped = (409, {}, {"cause": "container is not running", "message": "container is stopped", "response": 409})
        workload, supervisor, asked = probe(rig, [(200, {}, {"Status": "stopped"}), stopped])
        rig.boxes.boxes[supervisor]["State"]["Health"] = {"Status": "stopped", "FailingStreak": 0, "Log": []}
        await rig.driver.observe(workload)
        await eventually(lambda: len(asked) == 2 and ("probe", supervisor) not in rig.driver.tasks, "probing ended")
        assert rig.sink.refreshes == [(workload, "sb-1")]  # the one change the probe saw
        ready = (await rig.driver.get("sb-1")).status.conditions[0]
        assert (ready.status, ready.reason) == ("Unknown", "HealthCheckStopped")
        [listed] = [s.status.conditions[0] for s in await rig.driver.list_sandboxes() if s.id == "sb-1"]
        # a list entry cannot say whether there is a check (5.4.2 lists "reset" for a check of NONE)
        assert (listed.status, listed.reason) == ("True", "ContainerRunning")
        assert not any(r.endswith(f"/containers/{workload}/stop") for r in rig.fake.calls())
        assert "SupervisorExited" not in rig.sink.reasons()

    async def main() -> None:
        async with driver_on(CHECKED) as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_container_whose_check_is_none_is_never_probed() -> None:
    """Podman 5.x keeps ``{"Test": ["NONE"]}`` for a container made with its image's check
    turned off (podmand's workload), and answers a run of it 409 "has no defined healthcheck".
    Each look at such a workload started a probe that asked once and ended (seen in the VM
    lane's journal: a 409 for every event of the pair); it is not probed at all."""
    async def body(rig: Rig) -> None:
        healthy = (200, {}, {"Status": "healthy", "FailingStreak": 0, "Log": []})
        workload, _, asked = probe(rig, [healthy])
        rig.boxes.boxes[workload]["Config"]["Healthcheck"] = {"Test": ["NONE"]}
        workload_asked: list[str] = []

        def no_check(req: Request) -> tuple[int, dict[str, str], object]:
            workload_asked.append(req.path)
            return 409, {}, {"cause": "no healthcheck", "message": "has no defined healthcheck", "response": 409}

        rig.fake.route("GET", f"/containers/{workload}/healthcheck", no_check)
        for _ in range(3):
            await rig.driver.observe(workload)
        # The workload's probe would be made before its supervisor's, in the same look.
        await eventually(lambda: asked, "the supervisor's check")
        assert workload_asked == [] and ("probe", workload) not in rig.driver.tasks

    async def main() -> None:
        async with driver_on(CHECKED) as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), 30))
