"""Health against real Podman: ``podmand health`` (the sidecar's HEALTHCHECK) fails once
Podman's API has been gone for ``podman_down_grace`` seconds and passes again when
it is back. The test runs its own ``podman system service`` on a private socket and
stops only that one, by the PID it started.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from tests.wait import wait_until

from .conftest import Podmand
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
