"""Health against real Podman: ``podmand health`` (the sidecar's HEALTHCHECK) fails once
Podman's API has been gone for ``podman_down_grace`` seconds and passes again when
it is back (the test runs its own ``podman system service`` on a private socket and
stops only that one, by the PID it started); a sandbox's Ready follows its supervisor's
health check.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import podman

from podmand._proto import compute_driver_pb2 as pb
from tests.wait import wait_until

from .conftest import Podmand, containers_of, ready, run_in, sandbox
from .privatepodman import private_podman

GRACE = 2


def health(daemon: Podmand) -> int:
    return subprocess.run(daemon.command("health"), capture_output=True, timeout=30).returncode


def test_health_fails_while_podman_is_gone_and_recovers(make_podmand: Callable[..., Podmand]) -> None:
    with private_podman() as service:
        daemon = make_podmand({"PODMAND_PODMAN_DOWN_GRACE": str(GRACE), "PODMAND_PODMAN_AUTOSTART": "false"},
                              socket=service.socket)
        assert health(daemon) == 0
        service.kill()
        wait_until(lambda: health(daemon) == 1, GRACE + 10, "podmand health to fail after the grace period")
        logs = daemon.logs()
        assert logs.count("lost Podman's event stream") == 1, logs
        assert logs.count(f"Podman has been unreachable for {GRACE} s") == 1, logs

        service.start()
        wait_until(lambda: health(daemon) == 0, 30, "podmand health to pass again")
        wait_until(lambda: "Podman is reachable again after" in daemon.logs(), 10, "the return to be logged")
        assert daemon.proc is not None and daemon.proc.poll() is None


def test_the_supervisors_health_check_is_the_sandboxs_ready(
        make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """With ``health_check_interval`` the supervisor carries the health check (its own
    ``health`` command on its health socket) and the sandbox's Ready is its result (contract
    §4.6, driver/pairs.fold): passed once the supervisor serves, failed once the check keeps
    failing (its socket removed from inside), the workload still running meanwhile."""
    daemon = make_podmand({"OPENSHELL_HEALTH_CHECK_INTERVAL_SECS": "2"})
    watch = daemon.watch()
    box = sandbox()
    cleanup.append(box.id)
    daemon.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    snap = watch.wait_reason(box.id, "HealthCheckPassed", timeout=120)
    assert ready(snap) is not None and ready(snap).status == "True"  # type: ignore[union-attr]
    [supervisor] = containers_of(podman_client, box.id, "supervisor")
    assert supervisor.attrs["State"]["Health"]["Status"] == "healthy"
    assert supervisor.attrs["Config"]["Healthcheck"]["Test"][1:3] == ["/openshell-supervisor", "health"]
    assert run_in(supervisor, ["/bin/rm", "/run/openshell/supervisor-health.sock"])[0] == 0
    snap = watch.wait_reason(box.id, "HealthCheckFailed", timeout=120)
    assert ready(snap).status == "False"  # type: ignore[union-attr]
    [workload] = containers_of(podman_client, box.id)
    assert workload.attrs["State"]["Running"]
    assert daemon.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
