"""A stop or removal that rootless Podman 5.4.2 fails in netavark's network teardown
(podmand/driver/teardown.py), on the fake libpod: asked again, then UNAVAILABLE naming
the sandbox, never INTERNAL; state left for a later retry to finish.

The 500s are Podman 5.4.2's, as its code words them: Container.cleanup's
"removing container <id> network: " (libpod/container_internal.go) around containers/common
v0.62.3's netavarkError (libnetwork/netavark/exec.go) carrying netavark 1.14's error
(src/network/bridge.rs remove_link), a remove prefixed by removeContainer's
"cleaning up container <id>: " (libpod/runtime_ctr.go); the body is utils.Error's (its
cause the innermost error, pkg/api/handlers/utils/errors.go)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc
import pytest

from podmand import names, servicer
from podmand.config import Settings
from podmand.driver import teardown
from podmand.errors import Unavailable
from podmand.libpod import PodmanError
from tests.fakes.harness import Rig, driver_on
from tests.fakes.libpod import Reply, Request

DEADLINE = 30.0
VETH = "netavark: failed to delete container veth eth0: Netlink error: No such device (os error 19)"
BRIDGE = "netavark: failed to get bridge interface: Netlink error: No such device (os error 19)"


def stop_failed(cid: str, cause: str = VETH) -> Reply:
    """POST /containers/{id}/stop: stopped, then its cleanup's network teardown failed."""
    return 500, {}, {"cause": cause, "message": f"removing container {cid} network: {cause}", "response": 500}


def remove_failed(cid: str, cause: str = BRIDGE) -> Reply:
    """DELETE /containers/{id}: removed, but its cleanup's network teardown failed."""
    message = f"cleaning up container {cid}: removing container {cid} network: {cause}"
    return 500, {}, {"cause": cause, "message": message, "response": 500}


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teardown, "PAUSE", 0.0)


def run(body: Callable[[Rig], Awaitable[None]]) -> None:
    async def main() -> None:
        async with driver_on(lambda _t: Settings(stop_timeout=1)) as rig:
            await body(rig)

    asyncio.run(asyncio.wait_for(main(), DEADLINE))


def container(rig: Rig, sandbox_id: str) -> str:
    """A running container of the sandbox, with a 64-hex id as Podman's (its messages name it)."""
    box = rig.boxes.boxes.pop(rig.boxes.add(sandbox_id))
    cid = box["Id"] = "c0ffee" * 10 + "0123"
    rig.boxes.boxes[cid] = box
    return cid


def with_volume(rig: Rig, sandbox_id: str) -> str:
    volume = names.volume_name(sandbox_id)
    rig.fake.volumes[volume] = {"Name": volume, "Labels": {names.OWNER: names.OWNER_VALUE,
                                                           names.SANDBOX_ID: sandbox_id}}
    rig.driver.files.write(sandbox_id, "driver.credential", b"x")
    return volume


def status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    assert isinstance(exc, Exception)
    found = servicer.status_of(exc)
    assert found is not None, exc
    return found


# ---------------------------------------------------------------- the match


@pytest.mark.parametrize("message", [
    f"cleaning up container {'ab' * 32}: removing container {'ab' * 32} network: {BRIDGE}",
    f"removing container {'ab' * 32} network: {VETH}",
    f"removing container {'ab' * 32} network: netavark (exit code 1): {VETH}",  # the service at log level info
    f"removing container {'ab' * 32} network: netavark encountered multiple errors:\n\t- a\n\t- b",
])
def test_podmans_network_teardown_errors_are_recognised(message: str) -> None:
    assert PodmanError(500, message).network_teardown


@pytest.mark.parametrize(("status_code", "message"), [
    (404, f"removing container {'ab' * 32} network: {VETH}"),
    (500, VETH),  # netavark's words alone: not Podman's teardown wording
    (500, f"cleaning up container {'ab' * 32} network after setup failure: {VETH}"),  # a start's, not a teardown
    (500, f"removing container {'ab' * 32} network: CNI plugin failed"),
    (500, f"unmounting container {'ab' * 32} storage: device or resource busy"),
])
def test_other_errors_are_not_network_teardown(status_code: int, message: str) -> None:
    assert not PodmanError(status_code, message).network_teardown


# ---------------------------------------------------------------- DeleteSandbox


def test_a_removal_podman_failed_in_netavark_is_asked_again_and_the_delete_finishes() -> None:
    """As 5.4.2 does: the first DELETE removes the container and answers the teardown 500;
    asked again, Podman says 404; the delete goes on and removes everything."""

    async def body(rig: Rig) -> None:
        cid = container(rig, "sb-1")
        volume = with_volume(rig, "sb-1")
        removes = rig.boxes.remove

        def remove(req: Request) -> Reply:
            first = rig.fake.count(f"DELETE .*/containers/{cid}") == 1
            answer = removes(req)
            return remove_failed(cid) if first else answer

        rig.fake.route("DELETE", f"/containers/{cid}", remove)
        assert await rig.driver.delete("sb-1")
        assert rig.fake.count(f"DELETE .*/containers/{cid}") == 2
        assert rig.boxes.boxes == {} and volume not in rig.fake.volumes
        assert not rig.driver.files.dir("sb-1").exists()
        assert [e.deleted.sandbox_id for e in rig.sink.events if e.WhichOneof("payload") == "deleted"] == ["sb-1"]

    run(body)


def test_a_removal_podman_keeps_failing_in_netavark_is_unavailable_and_a_later_delete_finishes() -> None:
    async def body(rig: Rig) -> None:
        cid = container(rig, "sb-1")
        volume = with_volume(rig, "sb-1")
        rig.fake.route("DELETE", f"/containers/{cid}", lambda _req: remove_failed(cid))
        with pytest.raises(Unavailable) as err:
            await rig.driver.delete("sb-1")
        assert rig.fake.count(f"DELETE .*/containers/{cid}") == teardown.ATTEMPTS
        code, message = status(err.value)
        assert code == grpc.StatusCode.UNAVAILABLE
        assert message.startswith("sandbox sb-1: removing its container failed 3 times in Podman's network "
                                  "teardown (netavark); try again: ")
        assert message.endswith(remove_failed(cid)[2]["message"])  # Podman's own words, quoted whole
        # Nothing half done: the sandbox is all there, and no Deleted was sent.
        assert cid in rig.boxes.boxes and volume in rig.fake.volumes and rig.driver.files.dir("sb-1").exists()
        assert not [e for e in rig.sink.events if e.WhichOneof("payload") == "deleted"]
        assert "sb-1" not in rig.driver.removal.deleting and len(rig.driver.locks) == 0
        rig.fake.route("DELETE", f"/containers/{cid}", rig.boxes.remove)  # Podman recovered
        assert await rig.driver.delete("sb-1")
        assert rig.boxes.boxes == {} and volume not in rig.fake.volumes and not rig.driver.files.dir("sb-1").exists()

    run(body)


def test_another_removal_error_is_not_asked_again() -> None:
    async def body(rig: Rig) -> None:
        cid = container(rig, "sb-1")
        other = (500, {}, {"message": f"cleaning up container {cid}: unmounting container {cid} storage: busy"})
        rig.fake.route("DELETE", f"/containers/{cid}", other)
        with pytest.raises(PodmanError) as err:
            await rig.driver.delete("sb-1")
        assert rig.fake.count(f"DELETE .*/containers/{cid}") == 1
        assert status(err.value)[0] == grpc.StatusCode.INTERNAL

    run(body)


# ---------------------------------------------------------------- StopSandbox


def test_a_stop_podman_failed_in_netavark_is_asked_again_and_the_sandbox_is_stopped() -> None:
    """As 5.4.2 does: the container stopped, its cleanup failed in netavark (500); asked
    again (Podman: 304, as it is stopped) the stop succeeds and the sandbox is Suspended."""

    async def body(rig: Rig) -> None:
        cid = container(rig, "sb-1")

        def stop(req: Request) -> Reply:
            rig.boxes.boxes[cid]["State"].update(Status="exited", Running=False)
            return stop_failed(cid) if rig.fake.count(f"POST .*/containers/{cid}/stop") == 1 else (304, {}, b"")

        rig.fake.route("POST", f"/containers/{cid}/stop", stop)
        await rig.driver.stop("sb-1")
        assert rig.fake.count(f"POST .*/containers/{cid}/stop") == 2
        assert rig.driver.files.stopped_container("sb-1") == cid
        snap = await rig.driver.get("sb-1")
        assert [(c.type, c.reason) for c in snap.status.conditions][1] == (names.SUSPENDED, "ContainerStopped")

    run(body)


def test_a_stop_podman_keeps_failing_in_netavark_is_unavailable_and_not_marked_stopped() -> None:
    async def body(rig: Rig) -> None:
        cid = container(rig, "sb-1")
        rig.fake.route("POST", f"/containers/{cid}/stop", lambda _req: stop_failed(cid, BRIDGE))
        with pytest.raises(Unavailable) as err:
            await rig.driver.stop("sb-1")
        assert rig.fake.count(f"POST .*/containers/{cid}/stop") == teardown.ATTEMPTS
        code, message = status(err.value)
        assert code == grpc.StatusCode.UNAVAILABLE
        assert message == ("sandbox sb-1: stopping its container failed 3 times in Podman's network teardown "
                           f"(netavark); try again: removing container {cid} network: {BRIDGE}")
        assert rig.driver.files.stopped_container("sb-1") == "" and len(rig.driver.locks) == 0

    run(body)


def test_netavarks_list_of_errors_is_quoted_on_one_line() -> None:
    async def body(rig: Rig) -> None:
        cid = container(rig, "sb-1")
        several = "netavark encountered multiple errors:\n\t- a: No such device\n\t- b: No such device"
        rig.fake.route("POST", f"/containers/{cid}/stop", lambda _req: stop_failed(cid, several))
        with pytest.raises(Unavailable) as err:
            await rig.driver.stop("sb-1")
        assert "\n" not in err.value.message and "multiple errors: - a: No such device - b: No such device" in (
            err.value.message)

    run(body)
