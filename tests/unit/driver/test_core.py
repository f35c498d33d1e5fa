"""The Driver in-process on a fake libpod: reads, the exit path, provisioning
failures, delete and garbage collection (tests/fakes/harness.py)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.driver import Driver
from podmand.errors import AlreadyExists, DriverError, FailedPrecondition, NotFound
from podmand.sandbox import imagefiles
from podmand.sandbox.files import LAUNCH, unwritable
from podmand.sandbox.spec import encode_intent
from tests.fakes import infos
from tests.fakes.harness import Rig, Sink, driver_on, eventually, labels_for
from tests.fakes.libpod import Request
from tests.jwt import make_launch

DEADLINE = 30.0
IMAGE = "registry.example/app:1"
GENERATION = "g0000000000000001"
WAIT = lambda _tmp: Settings(exit_watch="wait")  # noqa: E731  # the /wait per running container


def run(body: Callable[[Rig], Awaitable[None]], settings: Callable[[Path], Settings] = lambda _t: Settings(
        )) -> None:
    async def main() -> None:
        async with driver_on(settings) as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


def ready(snap: pb.DriverSandbox) -> str:
    return snap.status.conditions[0].reason


def box(sandbox_id: str) -> pb.DriverSandbox:
    template = pb.DriverSandboxTemplate(image=IMAGE)
    spec = pb.DriverSandboxSpec(template=template, launch_authentication=make_launch(sandbox_id, GENERATION))
    return pb.DriverSandbox(id=sandbox_id, name="demo", workspace="ws", spec=spec)


# ---------------------------------------------------------------- reads have no side effects


def test_get_and_list_read_without_starting_tasks_or_publishing() -> None:
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("sb-1")
        cid2 = rig.boxes.add("sb-2", "exited", exit_code=3, finished_at="2026-11-29T17:05:00Z")
        got = await rig.driver.get("sb-1")
        listed = await rig.driver.list_sandboxes()
        assert (got.id, ready(got)) == ("sb-1", "ContainerRunning")
        assert [(s.id, ready(s)) for s in listed] == [("sb-1", "ContainerRunning"), ("sb-2", "ContainerExited")]
        assert (await rig.driver.get("sb-2")).status.conditions[0].message == "Container exited with code 3"
        assert rig.sink.events == [] and rig.sink.refreshes == []  # an exit read is not announced
        assert len(rig.driver.tasks) == 0 and len(rig.driver.observer) == 0
        # The event path does what reads must not: an exit waiter, cached facts, the announcement.
        assert ready(await rig.driver.observe(cid)) == "ContainerRunning"  # type: ignore[arg-type]
        await rig.driver.observe(cid2)
        assert len(rig.driver.tasks) == 1 and len(rig.driver.observer) == 2
        assert rig.sink.reasons() == ["ContainerExited"]

    run(body, WAIT)


def test_a_container_bearing_a_sandboxs_labels_under_another_name_is_not_that_sandbox() -> None:
    """Podman copies an image's labels onto its containers: a reader of a hostile image
    may carry the victim's every label. Lists, lookups and RPCs never take it for the victim."""
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("victim")
        impostor = rig.boxes.add("impostor")
        rig.boxes.boxes[impostor]["Config"]["Labels"] = labels_for("victim")  # under its own name
        assert [s.id for s in await rig.driver.list_sandboxes()] == ["victim"]
        assert (await rig.driver.get("victim")).status.instance_id == cid[:12]
        await rig.driver.stop("victim")
        assert rig.boxes.boxes[impostor]["State"]["Status"] == "running"  # untouched
        assert rig.boxes.boxes[cid]["State"]["Status"] == "exited"
        del rig.boxes.boxes[cid]
        with pytest.raises(NotFound):  # the victim is gone: the impostor never stands in
            await rig.driver.get("victim")
        assert impostor not in (rig.driver.index.containers("victim") or [])

    run(body, WAIT)


def test_get_of_an_unknown_sandbox_is_not_found() -> None:
    async def body(rig: Rig) -> None:
        with pytest.raises(NotFound):
            await rig.driver.get("sb-none")
        assert len(rig.driver.locks) == 0

    run(body)


def test_list_uses_what_the_event_path_learned_from_inspect() -> None:
    """The list endpoint does not say OOM: a list after an observed OOM kill does."""

    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("sb-1", "exited", exit_code=137, oom=True, finished_at="2026-11-29T17:05:00Z")
        assert [ready(s) for s in await rig.driver.list_sandboxes()] == ["ContainerRuntimeRestart"]
        await rig.driver.observe(cid)
        assert [ready(s) for s in await rig.driver.list_sandboxes()] == ["OOMKilled"]

    run(body)


# ---------------------------------------------------------------- the exit path


def test_a_wait_answer_asks_for_a_refresh_and_the_exit_is_announced_once() -> None:
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("sb-1")
        await rig.driver.observe(cid)
        await eventually(lambda: rig.boxes.waits.opened == 1, "the exit waiter's /wait")
        rig.boxes.end(cid, 1)
        rig.boxes.waits.send(b"1")
        await eventually(lambda: rig.sink.refreshes, "a refresh from the exit waiter")
        assert rig.sink.refreshes == [(cid, "sb-1")]
        await eventually(lambda: len(rig.driver.tasks) == 0, "the exit waiter to end")
        # What the hub does with the refresh, twice (a died event follows the /wait answer):
        snaps = [await rig.driver.observe(cid), await rig.driver.observe(cid)]
        assert [ready(s) for s in snaps if s] == ["ContainerExited", "ContainerExited"]
        assert rig.sink.reasons() == ["ContainerExited"]
        warning = rig.sink.events[0].platform_event
        assert (warning.sandbox_id, warning.event.type) == ("sb-1", "Warning")

    run(body, WAIT)


def test_an_unreadable_wait_answer_still_asks_for_a_refresh() -> None:
    """Podman answered /wait with something that is not an exit code: it answered, so
    the waiter still has the hub look (inspect says what happened) and ends quietly."""

    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("sb-1")
        await rig.driver.observe(cid)
        await eventually(lambda: rig.boxes.waits.opened == 1, "the exit waiter's /wait")
        rig.boxes.waits.send(b"not an exit code")
        await eventually(lambda: rig.sink.refreshes, "a refresh from the exit waiter")
        assert rig.sink.refreshes == [(cid, "sb-1")]
        await eventually(lambda: len(rig.driver.tasks) == 0, "the exit waiter to end")

    run(body, WAIT)


def test_a_second_run_that_ends_is_announced_again() -> None:
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("sb-1", "exited", exit_code=2, finished_at="2026-11-29T17:05:00Z")
        await rig.driver.observe(cid)
        rig.boxes.boxes[cid]["State"].update(Status="exited", FinishedAt="2026-11-29T17:09:00Z", ExitCode=143)
        await rig.driver.observe(cid)
        assert rig.sink.reasons() == ["ContainerExited", "ContainerRuntimeRestart"]

    run(body)


def test_a_container_gone_is_dropped_from_the_cache() -> None:
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("sb-1", "exited", exit_code=1, finished_at="2026-11-29T17:05:00Z")
        await rig.driver.observe(cid)
        del rig.boxes.boxes[cid]
        assert await rig.driver.observe(cid) is None
        assert len(rig.driver.observer) == 0

    run(body)


# ---------------------------------------------------------------- pending creates


def test_a_create_provisions_and_starts_its_container() -> None:
    async def body(rig: Rig) -> None:
        identity = await rig.driver.create(box("sb-1"))
        pending = rig.driver.provisioning.get("sb-1")
        assert pending is not None and identity == names.runtime_identity(pending.instance, GENERATION)
        await eventually(lambda: "Started" in rig.sink.reasons(), "the Started event")
        cid, supervisor = rig.boxes.of("sb-1"), rig.boxes.of("sb-1", names.ROLE_SUPERVISOR)
        assert [rig.boxes.boxes[c]["State"]["Status"] for c in (cid, supervisor)] == ["running", "running"]
        assert rig.sink.refreshes == [(cid, "sb-1")]  # the hub takes the running snapshot from here
        assert [r for r in rig.sink.reasons() if r != "Pulling"] == ["Scheduled", "Pulled", "Started"]
        assert rig.sink.sandbox_reasons() == ["Starting", "Starting", "ContainerStarting"]
        assert rig.driver.provisioning.get("sb-1") is None
        assert ready(await rig.driver.get("sb-1")) == "ContainerRunning"
        assert await rig.driver.create(box("sb-1")) == identity  # an identical retry
        assert rig.fake.count("POST .*/containers/create") == 4  # two image readers and the pair
        assert rig.driver.files.launch("sb-1") is None  # the supervisor's auth.json is the only copy

    run(body)


MOUNTS = lambda _tmp: Settings(allow_driver_config=True, admission_enabled=False)  # noqa: E731


def with_volume_subpath(sandbox_id: str) -> pb.DriverSandbox:
    sandbox = box(sandbox_id)
    sandbox.spec.template.driver_config.update(
        {"mounts": [{"type": "volume", "source": "shared-data", "target": "/data", "subpath": "team-a"}]})
    return sandbox


def sandbox_spec(rig: Rig, sandbox_id: str) -> dict[str, Any]:
    """The workload's container spec podmand sent Podman for ``sandbox_id``."""
    [body] = [json.loads(body) for call, body in rig.fake.bodies if call.endswith("/containers/create")
              and json.loads(body).get("labels", {}).get(names.SANDBOX_ID) == sandbox_id
              and json.loads(body)["labels"].get(names.ISOLATION_ROLE) == names.ROLE_WORKLOAD]
    return body  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", ["4.3.1", "4.4.0"])
def test_a_volume_subpath_is_refused_before_anything_is_made_on_a_podman_that_would_ignore_it(version: str) -> None:
    """The driver asks Podman's /info for its version once; a Podman below 4.5 would mount the
    whole volume (4.3 has no SubPath, 4.4 follows a symlink out of it): ValidateSandboxCreate
    and CreateSandbox are FAILED_PRECONDITION naming the field and the version needed."""

    async def body(rig: Rig) -> None:
        rig.fake.route("GET", "/info", (200, {}, infos.info(version)))
        rig.fake.volumes["shared-data"] = {"Name": "shared-data", "Labels": {}}
        for attempt in (rig.driver.validate, rig.driver.create):
            with pytest.raises(FailedPrecondition) as exc:
                await attempt(with_volume_subpath("sb-1"))
            assert exc.value.message == (
                "sandbox.spec.template.driver_config.mounts[0].subpath: volume subpath needs Podman 4.5.0 or "
                f"newer, and Podman {version} would ignore it and mount the whole volume")
        assert rig.fake.count("POST .*/(volumes|containers)/create") == 0
        assert rig.fake.count("GET .*/info") == 1

    run(body, MOUNTS)


def test_a_volume_subpath_reaches_podman_where_it_is_honoured() -> None:
    async def body(rig: Rig) -> None:
        rig.fake.route("GET", "/info", (200, {}, infos.info("5.4.2")))
        rig.fake.volumes["shared-data"] = {"Name": "shared-data", "Labels": {}}
        await rig.driver.validate(with_volume_subpath("sb-1"))
        await rig.driver.create(with_volume_subpath("sb-1"))
        await eventually(lambda: "Started" in rig.sink.reasons(), "the Started event")
        assert {"Name": "shared-data", "Dest": "/data", "Options": ["ro"], "SubPath": "team-a"} in \
            sandbox_spec(rig, "sb-1")["volumes"]

    run(body, MOUNTS)


def start_refused() -> tuple[int, dict[str, str], dict[str, object]]:
    """Podman's 500 for a start its runtime refused (utils.Error's body)."""
    cause = "crun: executable file `/openshell-supervisor` not found"
    return 500, {}, {"cause": cause, "message": f"OCI runtime error: {cause}", "response": 500}


def test_a_start_podman_refuses_fails_the_sandbox_for_good_and_removes_the_pair() -> None:
    """The pair's first start failing fails the sandbox with ContainerCreateFailed and
    Podman's words; the pair is removed, and the failure is recorded (not provisioned again)."""

    async def body(rig: Rig) -> None:
        rig.fake.route("POST", "/containers/[^/]+/start", start_refused())
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "ContainerCreateFailed" in rig.sink.reasons(), "the ContainerCreateFailed event")
        snap = await rig.driver.get("sb-1")
        reason, message = ready(snap), snap.status.conditions[0].message
        assert reason == "ContainerCreateFailed" and "executable file `/openshell-supervisor` not found" in message
        assert rig.boxes.boxes == {} and rig.fake.volumes.keys() == {names.volume_name("sb-1")}  # the pair removed
        assert rig.driver.files.failure("sb-1") == (reason, message)  # terminal: not provisioned again

    run(body)


def test_start_sandbox_of_a_stopped_pair_podman_refuses_says_podmans_words() -> None:
    async def body(rig: Rig) -> None:
        rig.boxes.add_pair("sb-1", "exited")
        rig.fake.route("POST", "/containers/[^/]+/start", start_refused())
        with pytest.raises(DriverError) as exc:
            await rig.driver.start("sb-1", launch_authentication=make_launch("sb-1", GENERATION))
        assert exc.value.message.startswith("starting the sandbox's pair failed: ")
        assert "executable file `/openshell-supervisor` not found" in exc.value.message

    run(body)


def test_a_host_gateway_ip_the_supervisor_cannot_dial_fails_the_sandbox_before_any_container() -> None:
    """0.0.0.0 passes the setting's load-time check (an IP address) but is no address to dial:
    the sandbox fails with HostGatewayInvalid naming the setting, and no container is made."""

    async def body(rig: Rig) -> None:
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "HostGatewayInvalid" in rig.sink.reasons(), "the HostGatewayInvalid event")
        snap = await rig.driver.get("sb-1")
        assert ready(snap) == "HostGatewayInvalid"
        assert snap.status.conditions[0].message == (
            "host_gateway_ip (--host-gateway-ip / OPENSHELL_PODMAN_HOST_GATEWAY_IP): 0.0.0.0 cannot be the "
            "supervisor's host-gateway address")
        made = rig.fake.created()
        assert made and all(name.startswith(imagefiles.READER_PREFIX) for name in made)  # image readers only

    run(body, lambda _tmp: Settings(host_gateway_ip="0.0.0.0"))


def failing_pulls(rig: Rig, message: str) -> None:
    """The sandbox image cannot be pulled; the supervisor image can."""
    default = (200, {"Transfer-Encoding": "chunked"}, b'{"stream":"pulling"}\n')

    def pull(req: Request) -> Any:
        return (500, {}, {"message": message}) if req.query.get("reference") == IMAGE else default

    rig.fake.route("POST", "/images/pull", pull)


def test_a_pull_failure_leaves_a_pending_sandbox_with_its_reason() -> None:
    async def body(rig: Rig) -> None:
        failing_pulls(rig, "manifest unknown")
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "ImagePullFailed" in rig.sink.reasons(), "the ImagePullFailed event")
        snap = await rig.driver.get("sb-1")
        assert ready(snap) == "ImagePullFailed" and "manifest unknown" in snap.status.conditions[0].message
        assert rig.sink.reasons()[0] == "Scheduled"
        assert rig.sink.sandbox_reasons()[0] == "Starting" and rig.sink.sandbox_reasons()[-1] == "ImagePullFailed"
        assert rig.driver.files.failure("sb-1") == ("ImagePullFailed", snap.status.conditions[0].message)
        assert [s.id for s in await rig.driver.list_sandboxes()] == ["sb-1"]

    run(body)


def test_a_terminal_failure_drops_the_launch_bundle_from_the_state_directory() -> None:
    """No pair is made of a failed create's bundle: its tokens leave the state directory
    (a StartSandbox brings a fresh one), the failure stays recorded."""

    async def body(rig: Rig) -> None:
        gate = asyncio.Event()

        async def pull(req: Request) -> Any:  # the sandbox image's fails, once let through
            if req.query.get("reference") != IMAGE:
                return 200, {"Transfer-Encoding": "chunked"}, b'{"stream":"pulling"}\n'
            await gate.wait()
            return 500, {}, {"message": "manifest unknown"}

        rig.fake.route("POST", "/images/pull", pull)
        await rig.driver.create(box("sb-1"))
        assert rig.driver.files.launch("sb-1") == box("sb-1").spec.launch_authentication  # kept while provisioning
        gate.set()
        await eventually(lambda: "ImagePullFailed" in rig.sink.reasons(), "the ImagePullFailed event")
        assert rig.driver.files.launch("sb-1") is None
        assert not (rig.driver.files.dir("sb-1") / LAUNCH).exists()
        assert rig.driver.files.failure("sb-1") is not None

    run(body)


def test_a_restart_reports_a_terminal_failure_again_without_provisioning() -> None:
    async def body(rig: Rig) -> None:
        failing_pulls(rig, "manifest unknown")
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "ImagePullFailed" in rig.sink.reasons(), "the ImagePullFailed event")
        pulls = rig.fake.count("POST .*/images/pull")
        again = Driver(rig.driver.settings, rig.driver.podman, rig.driver.state_dir, Sink())
        try:
            assert await again.resume() == 0
            assert ready(await again.get("sb-1")) == "ImagePullFailed"
            assert rig.fake.count("POST .*/images/pull") == pulls and len(again.tasks) == 0
        finally:
            await again.close()

    run(body)


def test_a_restart_resumes_from_the_hubs_list_without_listing_every_container_again() -> None:
    """After the hub's first list, resume's only container list is of image readers, by name
    (Podman then reads no sandbox container's state); the listed sandbox is not provisioned."""
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("sb-1", "running")
        rig.fake.route("GET", "/volumes/json", (200, {}, [{"Name": names.volume_name("sb-1"), "Labels": {
            **labels_for("sb-1", "ws"), names.INTENT: "{}", names.OWNER: names.OWNER_VALUE}}]))
        again = Driver(rig.driver.settings, rig.driver.podman, rig.driver.state_dir, Sink())
        try:
            assert [e.id for e in await again.listed()] == [cid]
            start = len(rig.fake.requests)
            assert await again.resume() == 0
            lists = [r for r in list(rig.fake.requests)[start:] if "/containers/json" in r]
            assert len(lists) == 1 and f'"name":["^{imagefiles.READER_PREFIX}"]' in lists[0], lists
            assert len(again.tasks) == 0
        finally:
            await again.close()

    run(body)


def test_stop_before_the_container_exists_ends_provisioning() -> None:
    async def body(rig: Rig) -> None:
        rig.fake.block_pulls()
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: rig.fake.count("POST .*/images/pull"), "a pull under way")
        await rig.driver.stop("sb-1")
        snap = await rig.driver.get("sb-1")
        assert ready(snap) == "ContainerStopped" and [c.type for c in snap.status.conditions][1:] == [names.SUSPENDED]
        assert rig.driver.files.stopped_container("sb-1") == "-"
        await eventually(lambda: len(rig.driver.tasks) == 1, "provisioning to end (the image events stay)")

    run(body)


# ---------------------------------------------------------------- delete


def test_delete_releases_the_lock_caches_and_pending_state() -> None:
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("sb-1", "exited", exit_code=1, finished_at="2026-11-29T17:05:00Z")
        await rig.driver.observe(cid)
        rig.fake.block_pulls()
        await rig.driver.create(box("sb-2"))
        assert len(rig.driver.observer) == 1 and rig.driver.provisioning.get("sb-2") is not None
        assert await rig.driver.delete("sb-1") and await rig.driver.delete("sb-2")
        assert len(rig.driver.locks) == 0 and len(rig.driver.observer) == 0
        assert rig.driver.provisioning.get("sb-2") is None and len(rig.driver.tasks) == 1  # the image events
        deleted = [e.deleted.sandbox_id for e in rig.sink.events if e.WhichOneof("payload") == "deleted"]
        assert deleted == ["sb-1", "sb-2"] and rig.boxes.boxes == {}
        assert not (rig.driver.state_dir / "sandboxes" / "sb-2").exists()
        assert await rig.driver.delete("sb-1") is False

    run(body)


async def create_held_at_podman(rig: Rig) -> asyncio.Event:
    """Create sb-1 and return once Podman was sent its container create, which it answers
    only when the returned event is set."""
    sent, release = asyncio.Event(), asyncio.Event()

    async def slow_create(req: Request) -> Any:
        if (req.json().get("labels") or {}).get(names.SANDBOX_ID) == "sb-1":
            sent.set()
            await release.wait()
        return rig.boxes.create(req)

    rig.fake.route("POST", "/containers/create", slow_create)
    await rig.driver.create(box("sb-1"))
    await asyncio.wait_for(sent.wait(), DEADLINE)
    return release


def test_delete_during_a_container_create_waits_for_podman_and_removes_that_container() -> None:
    """Podman finishes a create it was sent even when provisioning is cancelled: the
    delete waits for it, so the container it made is found and removed, not left behind."""

    async def body(rig: Rig) -> None:
        release = await create_held_at_podman(rig)
        deleting = asyncio.ensure_future(rig.driver.delete("sb-1"))
        await eventually(lambda: rig.driver.provisioning.get("sb-1") is None, "the pending create discarded")
        assert not deleting.done()  # still waiting for Podman's answer to the create
        release.set()
        assert await deleting
        assert rig.boxes.boxes == {}  # the container Podman made after all is gone too
        with pytest.raises(NotFound):
            await rig.driver.get("sb-1")

    run(body)


def test_stop_during_a_container_create_leaves_the_container_podman_made_stopped() -> None:
    """A stop while Podman is creating the container: the stop waits for it, and that
    container (never started) is the stopped one, reported Suspended, not started later."""

    async def body(rig: Rig) -> None:
        release = await create_held_at_podman(rig)
        stopping = asyncio.ensure_future(rig.driver.stop("sb-1"))
        await eventually(lambda: rig.driver.provisioning.get("sb-1").stopped, "provisioning stopped")  # type: ignore[union-attr]
        assert not stopping.done()
        release.set()
        await stopping
        cid = rig.boxes.of("sb-1")
        assert [box["State"]["Status"] for box in rig.boxes.boxes.values()] == ["created", "created"]
        assert rig.fake.count("POST .*/containers/.*/start") == 0  # made and filled, never started
        assert rig.driver.files.stopped_container("sb-1") == cid
        assert rig.driver.provisioning.get("sb-1") is None and rig.sink.refreshes[-1] == (cid, "sb-1")
        snap = await rig.driver.get("sb-1")
        assert [(c.type, c.reason) for c in snap.status.conditions][1] == (names.SUSPENDED, "ContainerStopped")

    run(body)


def test_forget_cleans_up_after_a_container_removed_out_of_band() -> None:
    async def body(rig: Rig) -> None:
        cid = rig.boxes.add("sb-1")
        rig.driver.files.write("sb-1", "driver.credential", b"x")
        assert await rig.driver.forget("sb-1") is False  # still there
        del rig.boxes.boxes[cid]
        assert await rig.driver.forget("sb-1") is True
        assert not rig.driver.files.dir("sb-1").exists() and len(rig.driver.locks) == 0

    run(body)


# ---------------------------------------------------------------- garbage collection


def networks(rig: Rig, *entries: dict[str, Any]) -> None:
    found = {e["name"]: e for e in entries}
    rig.fake.route("GET", "/networks/json", (200, {}, list(found.values())))
    rig.fake.route("GET", "/networks/(?P<n>[^/]+)/json",
                   lambda req: (200, {}, found[n]) if (n := req.path.rsplit("/", 2)[-2]) in found else (404, {}, {}))


def test_garbage_collection_takes_only_old_leftovers_of_vanished_sandboxes() -> None:
    old = "2026-01-01T00:00:00Z"

    async def body(rig: Rig) -> None:
        d = rig.driver
        rig.boxes.add("live", workspace="ws")
        for sandbox_id in ("live", "vanished", "recent", "pending"):
            d.files.write(sandbox_id, "driver.credential", b"x")
        past = time.time() - 7200
        for sandbox_id in ("live", "vanished", "pending"):
            os.utime(d.files.dir(sandbox_id), (past, past))
        rig.fake.block_pulls()
        await d.create(box("pending"))
        own = {names.OWNER: names.OWNER_VALUE}
        networks(
            rig,
            {"name": d.networks.name("gone"), "labels": {**own, names.SANDBOX_WORKSPACE: "gone"}, "created": old},
            {"name": d.networks.name("ws"), "labels": {**own, names.SANDBOX_WORKSPACE: "ws"}, "created": old},
            {"name": "no-workspace", "labels": own, "created": old},
        )
        removed = await d.collect_garbage()
        assert removed == ["files:vanished", f"network:{d.networks.name('gone')}"]
        assert rig.fake.count(f"DELETE .*/networks/{d.networks.name('gone')}$") == 1
        assert rig.fake.count("DELETE .*/networks/") == 1
        assert {p.name for p in (d.state_dir / "sandboxes").iterdir()} == {"live", "recent", "pending"}

    run(body, lambda _t: Settings(gc_grace=3600))


# ---------------------------------------------------------------- Podman's floor on create


def pinned_images(_tmp: Path) -> Settings:
    """Supervisor and runtime images with fixed tags: pulled under 'missing' (':latest' is 'newer')."""
    return Settings(supervisor_image="registry.example/supervisor:1",
                    sandbox_runtime_image="registry.example/runtime:1")


# Not the calls under test here: the label-filtered list a lookup makes while the index
# is not loaded (lookup.py).
OTHERS = ("GET /containers/json",)


def create_calls(rig: Rig, start: int) -> list[str]:
    return [c for c in rig.fake.calls(start) if not c.startswith(OTHERS) and "/events" not in c]


async def created(rig: Rig, sandbox_id: str) -> int:
    """Create ``sandbox_id`` and wait until it started; the index of its first request."""
    start = len(rig.fake.requests)
    await rig.driver.create(box(sandbox_id))
    await eventually(lambda: any(s == sandbox_id for _c, s in rig.sink.refreshes), f"{sandbox_id} started")
    return start


def test_a_create_of_a_known_image_costs_podmans_floor() -> None:
    """Once a create pinned its images (sandbox, supervisor and runtime, whose binary is
    extracted once per ID), the next makes only the pair's own calls: its volumes, the
    look for an interrupted attempt's leftovers, the two containers, the fence's inspect,
    the uploads, the two starts. No pull, no image inspect."""

    async def body(rig: Rig) -> None:
        rig.driver.index.loaded()  # as the hub says once it listed every container: a miss means none
        first = create_calls(rig, await created(rig, "sb-1"))
        assert "POST /images/pull" in first and f"GET /images/{IMAGE}/json" in first  # learned here
        start = await created(rig, "sb-2")
        workload = f"/containers/{names.container_name('ws', 'demo', 'sb-2')}"
        supervisor = "/containers/openshell-supervisor-sb-2"
        assert rig.fake.calls(start) == [
            "POST /volumes/create", f"GET {supervisor}/json", f"GET {workload}/json",
            "GET /volumes/openshell-channel-sb-2/json", "POST /volumes/create",
            "POST /containers/create", f"GET {workload}/json", f"PUT {workload}/archive", f"PUT {workload}/archive",
            "POST /containers/create", f"PUT {supervisor}/archive",
            f"POST {workload}/start", f"POST {supervisor}/start",
        ]
        assert ready(await rig.driver.get("sb-2")) == "ContainerRunning"

    run(body, pinned_images)


def test_a_supervisor_image_on_a_moving_tag_is_still_pulled_each_create() -> None:
    """Pull policy 'newer' (the supervisor's and the runtime's ':latest') keeps its meaning;
    the sandbox image under 'missing' is not pulled again."""

    async def body(rig: Rig) -> None:
        await created(rig, "sb-1")
        start = await created(rig, "sb-2")
        pulled = [r.partition("reference=")[2] for r in rig.fake.requests[start:] if "/images/pull" in r]
        settings = rig.driver.settings
        assert sorted(pulled) == sorted(f"{image}&policy=newer"
                                        for image in (settings.supervisor_image, settings.sandbox_runtime_image))

    run(body)


def test_an_image_event_for_the_tag_makes_the_next_create_look_again() -> None:
    async def body(rig: Rig) -> None:
        await created(rig, "sb-1")
        tag = {"Type": "image", "Action": "tag", "Actor": {"ID": "b" * 64, "Attributes": {"name": IMAGE}}}
        rig.fake.image_events.send(tag)
        await eventually(lambda: rig.driver.validator.images.known(IMAGE) is None, "the tag event to be read")
        calls = create_calls(rig, await created(rig, "sb-2"))
        # Looked up once (validation's inspect pins it again for the pull under 'missing');
        # the supervisor's and the runtime's tags did not move: still known.
        assert [c for c in calls if "/images/" in c] == [f"GET /images/{IMAGE}/json"]

    run(body, pinned_images)


def test_with_the_image_events_down_every_create_looks_its_images_up() -> None:
    async def body(rig: Rig) -> None:
        rig.fake.route("GET", "/events", (500, {}, {"message": "no events backend"}))
        await created(rig, "sb-1")
        calls = create_calls(rig, await created(rig, "sb-2"))
        assert calls.count("POST /images/pull") == 3  # the supervisor's, the runtime's and the sandbox's
        assert calls.count(f"GET /images/{IMAGE}/json") == 2  # validation's and the pinning's

    run(body, pinned_images)


def test_a_record_found_by_creating_its_volume_is_an_identical_retry_or_already_exists() -> None:
    """No container, no state files: the create tries its volume and reads back the one
    there. Nothing of the request is left behind either way."""

    async def body(rig: Rig) -> None:
        identity = await rig.driver.create(box("sb-1"))
        await eventually(lambda: rig.sink.refreshes, "sb-1 started")
        rig.boxes.boxes.clear()
        rig.driver.files.remove("sb-1")
        start = len(rig.fake.requests)
        again = await rig.driver.create(box("sb-1"))
        assert names.stable_identity(again) == names.stable_identity(identity)
        assert create_calls(rig, start) == ["POST /volumes/create", f"GET /volumes/{names.volume_name('sb-1')}/json"]
        other = box("sb-1")
        other.spec.template.image = "registry.example/app:2"
        with pytest.raises(AlreadyExists):
            await rig.driver.create(other)
        assert not rig.driver.files.dir("sb-1").exists() and rig.driver.provisioning.get("sb-1") is None

    run(body)


async def two_held_creates(rig: Rig) -> str:
    """sb-1 and sb-2 created, both held at their pulls (released by the caller): the instance
    of sb-1's create, which its leftovers bear."""
    rig.fake.block_pulls()
    await rig.driver.create(box("sb-1"))
    await rig.driver.create(box("sb-2"))
    pending = rig.driver.provisioning.get("sb-1")
    assert pending is not None
    return pending.instance


def leftover_workload(rig: Rig, sandbox_id: str, instance: str) -> str:
    """A created workload under the sandbox's name bearing ``instance``, as a create left it."""
    left = rig.boxes.add(sandbox_id, "created", role=names.ROLE_WORKLOAD)
    rig.boxes.boxes[left]["Name"] = names.container_name("ws", "demo", sandbox_id)
    rig.boxes.boxes[left]["Config"]["Labels"][names.INSTANCE] = instance
    return left


def test_what_an_interrupted_attempt_of_a_create_left_is_removed_and_anothers_is_a_conflict() -> None:
    """Podman carried out a create podmand stopped waiting for: the next attempt finds the
    container and channel volume bearing its own instance, removes them and makes the pair
    whole. A container of another instance under the workload's name is a conflict: the
    sandbox fails, that container is left alone."""

    async def body(rig: Rig) -> None:
        instance = await two_held_creates(rig)
        leftover_workload(rig, "sb-1", instance)
        leftover_workload(rig, "sb-2", "another")
        channel = names.channel_volume_name("sb-1")
        rig.fake.volumes[channel] = {"Name": channel, "Labels": {names.INSTANCE: instance}}
        rig.fake.release_pulls()
        await eventually(lambda: "ContainerNameConflict" in rig.sink.reasons(), "sb-2's conflict")
        await eventually(lambda: ("sb-1-cid".ljust(64, "0"), "sb-1") in rig.sink.refreshes, "sb-1 started")
        assert rig.fake.count(f"DELETE .*/containers/{names.container_name('ws', 'demo', 'sb-1')}") == 1
        assert rig.fake.count(f"DELETE .*/volumes/{channel}") == 1
        assert rig.boxes.boxes[rig.boxes.of("sb-1")]["State"]["Status"] == "running"
        stranger = rig.boxes.boxes[rig.boxes.of("sb-2")]
        assert stranger["State"]["Status"] == "created" and stranger["Config"]["Labels"][names.INSTANCE] == "another"
        assert rig.fake.count(f"DELETE .*/containers/{names.container_name('ws', 'demo', 'sb-2')}") == 0

    run(body)


def test_a_bare_channel_volume_its_own_late_create_mounts_is_removed_anothers_is_a_conflict() -> None:
    """Seen in the VM lane (a create slower than the client's deadline): the attempt removed
    its labelled channel volume, then Podman carried out the workload's create and made the
    named volume again, without labels. The next attempt removes that volume with the
    container of its own instance that mounts it, and makes the pair; a bare volume that no
    leftover of this create mounts is still a conflict, left alone."""

    async def body(rig: Rig) -> None:
        channel = names.channel_volume_name("sb-1")
        left = leftover_workload(rig, "sb-1", await two_held_creates(rig))
        rig.boxes.boxes[left]["Mounts"] = [{"Type": "volume", "Name": channel, "Destination": names.CHANNEL_DIR}]
        rig.fake.volumes[channel] = {"Name": channel, "Labels": {}}
        bare = names.channel_volume_name("sb-2")
        rig.fake.volumes[bare] = {"Name": bare, "Labels": {}}
        rig.fake.release_pulls()
        await eventually(lambda: "VolumeNameConflict" in rig.sink.reasons(), "sb-2's conflict")
        await eventually(lambda: ("sb-1-cid".ljust(64, "0"), "sb-1") in rig.sink.refreshes, "sb-1 started")
        assert rig.fake.count(f"DELETE .*/volumes/{channel}") == 1
        assert rig.fake.count(f"DELETE .*/volumes/{bare}") == 0 and bare in rig.fake.volumes

    run(body)


def test_a_garbage_collection_pass_lists_containers_once() -> None:
    """On Podman 4.3.1 every container list queries the runtime for each running
    container: a pass makes one, for sandboxes and image readers alike, and a stale
    reader of this state directory found in it is still removed."""

    async def body(rig: Rig) -> None:
        for i in range(5):
            rig.boxes.add(f"sb-{i}")
        reader = rig.boxes.add("reader")
        rig.boxes.boxes[reader]["Name"] = "podmand-read-stale"
        rig.boxes.boxes[reader]["Config"]["Labels"] = {
            names.OWNER: names.OWNER_VALUE, names.STATE_DIR: str(rig.driver.state_dir)
        }
        lists = rig.fake.count("GET .*/containers/json")
        removed = await rig.driver.collect_garbage()
        assert rig.fake.count("GET .*/containers/json") == lists + 1
        assert removed == ["container:podmand-read-stale"]
        assert await rig.driver.collect_garbage() == []  # not again before gc_grace / 4

    run(body, lambda _t: Settings(gc_grace=3600))


async def reader_left(rig: Rig) -> tuple[dict[str, bool], str]:
    """An image read whose reader Podman refuses to remove (it is restarting) while
    ``refuse["on"]``: the switch, and the reader's name, left in UNREMOVED."""
    refuse = {"on": True}

    def remove(req: Request) -> Any:
        if refuse["on"]:
            return 500, {}, {"message": "connection reset: Podman is restarting"}
        return 200, {}, [{"Id": "reader"}]

    rig.fake.route("DELETE", "/containers/podmand-read-[^/]+", remove)
    await imagefiles.read_image_files(rig.driver.podman, "sha256:img", ["/etc/passwd"], str(rig.driver.state_dir))
    [left] = imagefiles.UNREMOVED
    return refuse, left


def test_a_reader_podman_did_not_remove_is_removed_at_the_next_collection_whatever_its_pace() -> None:
    """Podman restarting while podmand reads an image leaves the reader: the next call of
    collect_garbage removes it by name (no list), even between the full passes."""
    async def body(rig: Rig) -> None:
        refuse, left = await reader_left(rig)
        assert await rig.driver.collect_garbage() == []  # the first full pass: Podman still refuses
        refuse["on"] = False
        lists = rig.fake.count("GET .*/containers/json")
        assert await rig.driver.collect_garbage() == [f"container:{left}"]
        assert rig.fake.count("GET .*/containers/json") == lists and not imagefiles.UNREMOVED

    run(body, lambda _t: Settings(gc_grace=3600))



def test_close_removes_the_readers_podman_did_not_remove_before() -> None:
    """podmand's stop leaves no reader whose removal Podman refused earlier: the driver's
    close asks again, by name (issue 30, item 7)."""
    async def body(rig: Rig) -> None:
        refuse, left = await reader_left(rig)
        refuse["on"] = False
        await rig.driver.close()
        assert rig.fake.count(f"DELETE .*/containers/{left}") == 2 and not imagefiles.UNREMOVED

    run(body)

# ---------------------------------------------------------------- the state directory unwritable

def refusing(code: int) -> Callable[..., None]:
    def write(*_args: object) -> None:
        raise unwritable(Path("/state"), OSError(code, os.strerror(code), "/state/sandboxes/sb-1"))
    return write


def test_a_create_whose_files_cannot_be_written_leaves_nothing_and_works_once_writable() -> None:
    async def body(rig: Rig) -> None:
        files = rig.driver.files
        write = files.write
        files.write = refusing(errno.ENOSPC)  # type: ignore[method-assign]
        with pytest.raises(FailedPrecondition, match=r"not writable: No space left on device .*; free space"):
            await rig.driver.create(box("sb-1"))
        assert rig.fake.volumes == {} and rig.fake.count("POST .*/create") == 0 and files.sandbox_ids() == []
        assert rig.driver.provisioning.get("sb-1") is None
        files.write = write  # type: ignore[method-assign]
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "Started" in rig.sink.reasons(), "the Started event")

    run(body)


def test_a_container_whose_record_cannot_be_written_is_removed_and_the_sandbox_fails() -> None:
    async def body(rig: Rig) -> None:
        rig.driver.files.mark_created = refusing(errno.EROFS)  # type: ignore[method-assign]
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "ProvisioningFailed" in rig.sink.reasons(), "the ProvisioningFailed event")
        assert "remount its filesystem read-write" in (await rig.driver.get("sb-1")).status.conditions[0].message
        assert rig.boxes.boxes == {}  # created, then removed: no container without its record

    run(body)


def test_a_restart_reports_a_workload_removed_meanwhile_though_its_supervisor_remains() -> None:
    """A pair whose workload was removed while podmand was down, its supervisor left: reported
    ContainerRemoved, not provisioned again (the supervisor's list entry is no workload)."""
    async def body(rig: Rig) -> None:
        rig.boxes.add_pair("sb-1", "exited")
        del rig.boxes.boxes[rig.boxes.of("sb-1")]
        rig.driver.files.mark_created("sb-1", "gone".ljust(64, "0"))
        _, intent = encode_intent(box("sb-1"))
        rig.fake.route("GET", "/volumes/json", (200, {}, [{"Name": names.volume_name("sb-1"), "Labels": {
            **labels_for("sb-1", "ws"), names.INTENT: intent, names.OWNER: names.OWNER_VALUE,
            names.STATE_DIR: str(rig.driver.state_dir)}}]))
        rig.fake.route("GET", "/volumes/[^/]+/json", (200, {}, {"Name": names.volume_name("sb-1")}))
        again = Driver(rig.driver.settings, rig.driver.podman, rig.driver.state_dir, Sink())
        try:
            await again.listed()
            assert await again.resume() == 0
            assert ready(await again.get("sb-1")) == "ContainerRemoved"
        finally:
            await again.close()

    run(body)


def test_a_resync_looks_at_a_pair_of_its_own_whose_supervisor_is_gone_and_leaves_anothers() -> None:
    """The event of a supervisor's end can be missed: a resync's list still finds its running
    workload (``changed``), so the look stops it; never another podmand's pair (hands off)."""
    async def body(rig: Rig) -> None:
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "Started" in rig.sink.reasons(), "the Started event")
        theirs = rig.boxes.add_pair("sb-2")  # no generation nor launch bundle here: another podmand's
        for cid in (rig.boxes.of("sb-1"), theirs):
            await rig.driver.observe(cid)  # the hub has looked at both

        def workloads(entries: list[Any]) -> dict[str, bool]:
            return {e.labels[names.SANDBOX_ID]: rig.driver.changed(e) for e in entries
                    if e.labels.get(names.ISOLATION_ROLE) == names.ROLE_WORKLOAD}

        assert workloads(await rig.driver.listed()) == {"sb-1": False, "sb-2": False}
        for sandbox_id in ("sb-1", "sb-2"):
            del rig.boxes.boxes[rig.boxes.of(sandbox_id, names.ROLE_SUPERVISOR)]
        assert workloads(await rig.driver.listed()) == {"sb-1": True, "sb-2": False}
        await rig.driver.observe(rig.boxes.of("sb-1"))  # the look the resync asks for
        await eventually(lambda: rig.boxes.boxes[rig.boxes.of("sb-1")]["State"]["Status"] == "exited",
                         "sb-1's workload stopped")
        assert "SupervisorExited" in rig.sink.reasons()
        assert rig.boxes.boxes[theirs]["State"]["Status"] == "running"

    run(body)


@pytest.mark.parametrize(("name", "answer"), [
    # Podman 5.8: the head is 200 and the error comes as a line of the stream
    ("5.8 in-band", (200, {"Transfer-Encoding": "chunked"},
                     b'{"stream":"Trying to pull..."}\n{"error":"manifest unknown: no such tag"}\n')),
    # Podman 6.x: a missing tag is a 404 with a JSON body (pkg/api/handlers/libpod/images_pull.go)
    ("6.x head", (404, {}, {"cause": "manifest unknown", "message": "manifest unknown: no such tag",
                            "response": 404})),
])
def test_either_shape_of_a_failed_pull_is_the_same_terminal_reason(name: str, answer: Any) -> None:
    """issue 32: whichever way Podman says a pull failed, the sandbox ends ImagePullFailed with
    Podman's message, recorded as terminal (not retried after a restart)."""
    async def body(rig: Rig) -> None:
        default = (200, {"Transfer-Encoding": "chunked"}, b'{"stream":"pulling"}\n')
        rig.fake.route("POST", "/images/pull", lambda req: answer if req.query.get("reference") == IMAGE else default)
        await rig.driver.create(box("sb-1"))
        await eventually(lambda: "ImagePullFailed" in rig.sink.reasons(), f"ImagePullFailed ({name})")
        snap = await rig.driver.get("sb-1")
        assert ready(snap) == "ImagePullFailed" and "manifest unknown: no such tag" in snap.status.conditions[0].message
        assert rig.driver.files.failure("sb-1") is not None

    run(body)
