"""Health against real Podman: ``podmand health`` (the sidecar's HEALTHCHECK) fails once
Podman's API has been gone for ``podman_down_grace`` seconds and passes again when
it is back. The test runs its own ``podman system service`` on a private socket and
stops only that one, by the PID it started.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.wait import wait_until

from .conftest import USER, Podmand

GRACE = 2


class PodmanService:
    """``podman system service`` as the rootless user on ``socket``."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        entry = pwd.getpwnam(USER)
        env = [f"HOME={entry.pw_dir}", f"USER={USER}", "PATH=/usr/bin:/bin", "LANG=C.UTF-8",
               f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}"]
        # setpriv execs (no fork): the recorded PID is the service itself.
        self.proc = subprocess.Popen(
            ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", "env", "-i", *env,
             "podman", "system", "service", "--time=0", f"unix://{self.socket}"],
            cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(lambda: os.path.exists(self.socket) or self.proc.poll() is not None,  # type: ignore[union-attr]
                   30, "the private Podman service to listen")
        assert self.proc.poll() is None, "podman system service exited"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """End this service (by the PID this test started), then forget its socket."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)
        self.proc.wait(30)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)


@contextlib.contextmanager
def private_podman() -> Iterator[PodmanService]:
    workdir = Path(tempfile.mkdtemp(prefix="podmand-health-"))
    os.chmod(workdir, 0o755)
    shutil.chown(workdir, USER, USER)
    service = PodmanService(str(workdir / "podman.sock"))
    try:
        service.start()
        yield service
    finally:
        service.kill()
        shutil.rmtree(workdir, ignore_errors=True)


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
