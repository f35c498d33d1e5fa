"""The watch engine on real rootless Podman: out-of-band exits and removals,
many watchers, Podman restarting underneath, exits nobody watched."""

from __future__ import annotations

import signal
from collections.abc import Callable

import grpc
import podman

from podmand._proto import compute_driver_pb2 as pb
from tests.standin.launch import Launch

from .conftest import Podmand, Watch, containers_of, pair_of, ready, restart_rootless_podman, sandbox, wait_until

READY = 120.0  # a pair's first start, on a shared machine


def reasons(watch: Watch, sandbox_id: str) -> list[str]:
    return [ready(s).reason for s in watch.snapshots(sandbox_id)]


def test_out_of_band_kill_reaches_every_watcher(driver: Podmand, podman_client: podman.PodmanClient,
                                                cleanup: list[str]) -> None:
    """Three watchers see the same per-sandbox sequence, ending (as upstream V2 reports a SIGKILL
    nobody asked for) in ContainerRuntimeRestart with the code; a fourth client that never reads
    does not hold them up."""
    stalled = driver.stub.WatchSandboxes(pb.WatchSandboxesRequest())  # opened, never read
    watches = [driver.watch() for _ in range(3)]
    box = sandbox()
    cleanup.append(box.id)
    driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    for watch in watches:
        watch.wait_reason(box.id, "ContainerRunning", READY)
    [container] = containers_of(podman_client, box.id)
    container.kill()
    for watch in watches:
        snap = watch.wait_reason(box.id, "ContainerRuntimeRestart")
        assert "137" in ready(snap).message
    sequences = [[s.SerializeToString(deterministic=True) for s in w.snapshots(box.id)] for w in watches]
    assert sequences[0] == sequences[1] == sequences[2]
    assert reasons(watches[0], box.id)[-2:] == ["ContainerRunning", "ContainerRuntimeRestart"]

    def warnings() -> list[pb.DriverPlatformEvent]:
        return [e for e in watches[0].platform_events(box.id) if e.reason == "ContainerRuntimeRestart"]

    wait_until(warnings, what="the exit's platform event")
    assert len(warnings()) == 1 and warnings()[0].type == "Warning" and "137" in warnings()[0].message
    stalled.cancel()
    assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_podman_restart_ends_streams_then_snapshot_is_exact(driver: Podmand, podman_client: podman.PodmanClient,
                                                           cleanup: list[str]) -> None:
    """Podman's service restarting under an open stream ends it UNAVAILABLE; the next
    stream's snapshot matches Podman, including a change made while nobody watched."""
    watch = driver.watch()
    running, stopped = sandbox(), sandbox()
    for box in (running, stopped):
        cleanup.append(box.id)
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        watch.wait_reason(box.id, "ContainerRunning", READY)
    restart_rootless_podman()
    assert watch.done.wait(30), "stream still open after Podman restarted"
    assert watch.error is not None and watch.error.code() == grpc.StatusCode.UNAVAILABLE
    # while no stream is open. SIGKILL, not a stop: the runtime stand-in ends 0 on a SIGTERM
    # before its main process did, which podmand reads as the main process's exit (ContainerExited)
    containers_of(podman_client, stopped.id)[0].kill()

    def fresh() -> Watch | None:
        try:
            again = driver.watch()
            wait_until(lambda: again.latest(running.id) is not None or again.done.is_set(), 10, "a snapshot")
        except grpc.RpcError:
            return None
        return None if again.done.is_set() else again

    again = wait_until(fresh, 30, "a new watch stream after the restart")
    assert ready(again.latest(running.id)).reason == "ContainerRunning"
    snap = again.wait_reason(stopped.id, "ContainerRuntimeRestart")  # a kill not asked for by StopSandbox
    assert containers_of(podman_client, stopped.id)[0].status in ("exited", "stopped")  # 6.1.1 says stopped
    assert str(containers_of(podman_client, stopped.id)[0].attrs["State"]["ExitCode"]) in ready(snap).message
    for box in (running, stopped):
        assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted


def test_exit_while_unwatched_is_a_runtime_restart(make_podmand: Callable[..., Podmand],
                                                   podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """A sandbox killed while no podmand ran (a host or runtime crash) is reported as
    ContainerRuntimeRestart, which the gateway restarts; StartSandbox brings it back. (A
    SIGTERM is not this: the released runtime shuts down cleanly on it after confirmation,
    contract §7.1, and its exit says nothing of who sent it.)"""
    first = make_podmand()
    box = sandbox()
    cleanup.append(box.id)
    watch = first.watch()
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    watch.wait_reason(box.id, "ContainerRunning", READY)
    assert first.stop(signal.SIGTERM) == 0
    [container] = containers_of(podman_client, box.id)
    container.kill()  # the workload; its supervisor ends with it
    wait_until(lambda: {c.status for c in pair_of(podman_client, box.id)} <= {"exited", "stopped"}, 60,
               "the pair down", lambda: {c.name: c.status for c in pair_of(podman_client, box.id)})
    code = containers_of(podman_client, box.id)[0].attrs["State"]["ExitCode"]
    second = make_podmand()
    got = second.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=box.id)).sandbox
    assert (ready(got).status, ready(got).reason) == ("False", "ContainerRuntimeRestart")
    assert str(code) in ready(got).message, (code, ready(got).message)
    listed = [s for s in second.stub.ListSandboxes(pb.ListSandboxesRequest()).sandboxes if s.id == box.id]
    assert ready(listed[0]).reason == "ContainerRuntimeRestart"
    again = second.watch()
    second.stub.StartSandbox(pb.StartSandboxRequest(sandbox_id=box.id,
                                                    launch_authentication=Launch(sandbox_id=box.id).bundle()))
    again.wait_reason(box.id, "ContainerRunning", READY)
    assert {c.status for c in pair_of(podman_client, box.id)} == {"running"}
    assert second.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
