"""The pex as a process: start-up, discovery errors, restart, health probes."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable

import podman

from podmand._proto import compute_driver_pb2 as pb

from .conftest import Podmand, containers_of, ready, sandbox, volumes_of, wait_until


def test_ready_line_names_socket(driver: Podmand) -> None:
    """Against a live Podman: one ready line, carrying the driver socket path."""
    lines = [line for line in driver.logs().splitlines() if "ready: serving" in line]
    assert len(lines) == 1
    assert f"unix://{driver.socket}" in lines[0]


def test_missing_podman_socket_lists_paths(make_podmand: Callable[..., Podmand]) -> None:
    """No Podman: non-zero exit, and every path tried with the reason it failed."""
    daemon = make_podmand(
        {"OPENSHELL_PODMAN_SOCKET": "/nonexistent/podman.sock"}, start=False, socket="/nonexistent/podman.sock"
    )
    result = subprocess.run(daemon.command("serve"), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "/nonexistent/podman.sock: does not exist" in result.stderr
    assert "ready" not in result.stderr


def test_sigterm_ends_watch_and_removes_socket(driver: Podmand) -> None:
    """SIGTERM: watch streams end, the process exits 0 and its socket is gone."""
    watch = driver.watch()
    wait_until(lambda: driver.stub.ListSandboxes(pb.ListSandboxesRequest()) is not None, what="serving")
    assert driver.stop(signal.SIGTERM) == 0
    assert watch.done.wait(10)
    assert watch.error is not None
    assert not os.path.exists(driver.socket)


def test_restart_finishes_interrupted_create(
    make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]
) -> None:
    """SIGKILL right after create: the next podmand reports the sandbox and finishes it, no orphans."""
    first = make_podmand()
    box = sandbox(token=True)
    cleanup.append(box.id)
    first.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    first.stop(signal.SIGKILL)
    second = make_podmand({"PODMAND_GC_GRACE": "0", "PODMAND_RESYNC_INTERVAL": "0.5"}, start=False)
    second.workdir, second.state_dir, second.socket = first.workdir, first.state_dir, first.socket
    second.log_path = first.workdir / "podmand-2.log"
    second.env.update(PODMAND_STATE_DIR=str(first.state_dir), OPENSHELL_COMPUTE_DRIVER_SOCKET=first.socket)
    second.start()
    watch = second.watch()
    watch.wait_reason(box.id, "ContainerRunning")
    listed = [s for s in second.stub.ListSandboxes(pb.ListSandboxesRequest()).sandboxes if s.id == box.id]
    assert len(listed) == 1 and ready(listed[0]).status == "True"
    assert len(containers_of(podman_client, box.id)) == 1
    # An extractor container orphaned by the SIGKILL is garbage-collected.
    mine = {"label": f"io.podmand.state-dir={first.state_dir}"}
    wait_until(lambda: not [c for c in podman_client.containers.list(all=True, filters=mine)
                            if c.name.startswith("podmand-read-")], what="no orphan extractor")
    assert second.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
    assert containers_of(podman_client, box.id) == [] and volumes_of(podman_client, box.id) == []


def test_health_probes_run_by_podmand(make_podmand: Callable[..., Podmand], cleanup: list[str]) -> None:
    """With a healthcheck configured, podmand probes it itself (no systemd timers here)."""
    daemon = make_podmand({"OPENSHELL_HEALTH_CHECK_INTERVAL_SECS": "1"})
    watch = daemon.watch()
    box = sandbox()
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "HealthCheckPassed")
    assert ready(snap).status == "True"
    reasons = [ready(s).reason for s in watch.snapshots(box.id)]
    assert "ContainerRunning" not in reasons  # never Ready before the probe passed
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
