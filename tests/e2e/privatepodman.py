"""A ``podman system service`` of the test's own, as the rootless test user on a socket of
the test's choosing: for a test that stops Podman (health) or needs a second real socket
(discovery). Only the service this module started is stopped, by its PID.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.wait import wait_until

from .conftest import USER


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
