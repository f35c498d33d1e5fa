"""An OOM kill's reason on every Podman (issue 32): Podman 6 adds ``oomKilled`` to a
``died`` event; every version has the inspect's ``State.OOMKilled``. podmand reads the
inspect its look makes after the event, and that is enough on 6.x too, read from the
source (containers/podman v6.0.0-rc1): both come from the container's one
``state.OOMKilled``, set from conmon's oom file when Podman handles the exit
(``libpod/container_internal.go:213-218``), before the event is written
(``libpod/events.go:110-111``) and read as it is by inspect (``libpod/container_inspect.go:131``),
never cleared; conmon writes the oom file before the exit file (``src/conmon.c``
``check_cgroup2_oom`` then the exit files, v2.2.1), so no look after an exit reads the
flag unset. The attribute is not read: Podman builds a ``died`` event's attributes from the
container's labels, an image's included, and only then adds ``oomKilled`` when it is true
(``pkg/domain/entities/events.go:79-90``), so an image labelled ``oomKilled=true`` would
say it of every exit. Each test hands the hub the event as each version sends it."""

from __future__ import annotations

import pytest

from podmand import names
from podmand.sandbox.snapshots import oom_of_this_run
from podmand.watch.hub import Hub
from podmand.watch.inbox import Inbox, PodmanEvent
from tests.fakes.harness import Rig, labels_for
from tests.unit.watch.test_driver_hub import drain, podman_event, run, take, watching_one


@pytest.mark.parametrize("version", ["5.x", "6.x"])
def test_an_oom_kill_says_oomkilled_whichever_event_podman_sends(version: str) -> None:
    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid, stream = await watching_one(rig, hub, inbox, "sb-1")
        rig.boxes.end(cid, 137, oom=True)
        attributes = {**labels_for("sb-1"), "containerExitCode": "137"}
        if version == "6.x":
            attributes["oomKilled"] = "true"
        inbox.put(PodmanEvent(podman_event("died", cid, attributes)))
        await drain(hub, inbox)
        assert await take(stream, 2) == [("platform", "sb-1", "OOMKilled"), ("sandbox", "sb-1", "OOMKilled")]
        snap = await rig.driver.get("sb-1")
        assert snap.status.conditions[0].message == "Container was killed by the OOM killer"

    run(body)


def test_an_oomkilled_label_is_not_an_oom_kill() -> None:
    """An image's label ``oomKilled=true`` is copied onto the container and into every event's
    attributes: an exit Podman did not call an OOM kill stays the exit it was."""
    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid, stream = await watching_one(rig, hub, inbox, "sb-1")
        rig.boxes.boxes[cid]["Config"]["Labels"]["oomKilled"] = "true"  # as an image's label would be
        rig.boxes.end(cid, 1)
        labels = rig.boxes.boxes[cid]["Config"]["Labels"]
        assert labels[names.SANDBOX_ID] == "sb-1"
        inbox.put(PodmanEvent(podman_event("died", cid, {**labels, "containerExitCode": "1"})))
        await drain(hub, inbox)
        exited = "ContainerExited"
        assert await take(stream, 2) == [("platform", "sb-1", exited), ("sandbox", "sb-1", exited)]

    run(body)


def test_an_oom_kill_is_said_of_its_own_run_only() -> None:
    """Podman never clears ``State.OOMKilled`` (the fake keeps it as Podman does): after an
    OOM kill and a start, a plain exit is that exit, a later SIGKILL an OOM kill again, and
    a podmand restarted in between knows the first end from its state directory."""
    async def body(rig: Rig, hub: Hub, inbox: Inbox) -> None:
        cid, stream = await watching_one(rig, hub, inbox, "sb-1")

        async def end(code: int, oom: bool = False) -> str:
            rig.boxes.end(cid, code, oom=oom)
            inbox.put(PodmanEvent(podman_event("died", cid, {**labels_for("sb-1"), "containerExitCode": str(code)})))
            await drain(hub, inbox)
            [(_, _, reason), _] = await take(stream, 2)
            rig.boxes.boxes[cid]["State"].update(Status="running", Running=True, ExitCode=0)
            inbox.put(PodmanEvent(podman_event("start", cid, labels_for("sb-1"))))
            await drain(hub, inbox)
            assert await take(stream, 1) == [("sandbox", "sb-1", "ContainerRunning")]
            return reason

        assert await end(137, oom=True) == "OOMKilled"
        assert rig.boxes.boxes[cid]["State"]["OOMKilled"], "Podman's flag stays set"
        assert await end(3) == "ContainerExited"
        rig.driver.observer._facts.clear()  # what a restarted podmand knows: its state directory
        assert await end(1) == "ContainerExited"
        assert await end(137, oom=True) == "OOMKilled"
        snap = await rig.driver.get("sb-1")
        assert snap.status.conditions[0].reason == "ContainerRunning"

    run(body)


@pytest.mark.parametrize(("first", "finished", "code", "oom"), [
    ("", "t2", 1, True),      # never seen before: the flag as it stands
    ("t2", "t2", 1, True),    # the end it was first seen with
    ("t1", "t2", 1, False),   # a later end, not a SIGKILL: not an OOM kill
    ("t1", "t2", 137, True),  # a later SIGKILL: the OOM killer's signal
])
def test_the_flag_is_read_against_its_first_end(first: str, finished: str, code: int, oom: bool) -> None:
    assert oom_of_this_run(True, finished, code, first) is oom
    assert oom_of_this_run(False, finished, code, first) is False
