"""Teardown leaves nothing under the split topology: a pair whose supervisor was removed
behind podmand's back, and a stopped pair, are deleted with both containers, the channel
volume, the workspace volume and the state files gone.
"""

from __future__ import annotations

import podman

from podmand._proto import compute_driver_pb2 as pb

from .conftest import Podmand, containers_of, pair_of, sandbox, volumes_of, wait_until

READY = 120.0


def test_a_pair_missing_its_supervisor_or_stopped_is_deleted_whole(
        driver: Podmand, podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    watch = driver.watch()
    orphaned, stopped = sandbox(), sandbox()
    for box in (orphaned, stopped):
        cleanup.append(box.id)
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    for box in (orphaned, stopped):
        watch.wait_reason(box.id, "ContainerRunning", READY)
    assert all(len(pair_of(podman_client, box.id)) == 2 and len(volumes_of(podman_client, box.id)) == 2
               for box in (orphaned, stopped))
    # the supervisor removed out of band: its workload is taken down, the stream says why
    [supervisor] = containers_of(podman_client, orphaned.id, "supervisor")
    supervisor.remove(force=True)
    wait_until(lambda: [e for e in watch.platform_events(orphaned.id) if e.reason == "SupervisorExited"], 60,
               "a SupervisorExited event", lambda: watch.platform_events(orphaned.id))
    wait_until(lambda: containers_of(podman_client, orphaned.id)[0].status == "exited", 60, "the workload stopped")
    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=orphaned.id))  # no supervisor to stop: fine
    driver.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=stopped.id))
    watch.wait_reason(stopped.id, "ContainerStopped")
    for box in (orphaned, stopped):
        assert driver.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted is True
        wait_until(lambda b=box: watch.deleted(b.id), what="Deleted event")
        assert pair_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []
        assert not (driver.state_dir / "sandboxes" / box.id).exists()
    assert "code=INTERNAL" not in driver.logs()
    watch.cancel()
