"""Podman's API when none is running: the pex's ``serve`` as a fresh user on a host
without logind (no XDG_RUNTIME_DIR, no /run/user/<uid>, no Podman service, no store,
no storage.conf) starts the user's own ``podman system service``, keeps it, and stops it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.freshuser import FreshUser, fresh_user
from tests.wait import wait_until

STARTED = re.compile(r"started Podman's API service \(pid (\d+)\) at (\S+)( \(new store: overlay\))?")
RESTARTED = re.compile(r"restarted Podman's API service \(pid (\d+)\)")


@pytest.fixture(scope="module")
def user() -> Iterator[FreshUser]:
    with fresh_user("pauto") as u:
        yield u


def marked(user: FreshUser, mark: str) -> list[int]:
    """The user's processes carrying ``PODMAND_E2E_MARK=<mark>``: podmand itself (its Podman
    child does not inherit podmand's own settings)."""
    found = []
    for pid in user.pids():
        try:
            if f"PODMAND_E2E_MARK={mark}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(pid)
        except OSError:
            continue
    return found


def services(user: FreshUser) -> list[int]:
    return user.pids_of("podman", "system", "service")


def test_autostart_off_keeps_the_error_naming_the_setting(user: FreshUser, pex_file: Path) -> None:
    out = user.run([str(pex_file), "serve"], {"PODMAND_PODMAN_AUTOSTART": "false"})
    assert out.returncode == 1, out.stdout + out.stderr
    assert "no responsive Podman API socket found" in out.stderr
    assert f"/tmp/podman-run-{user.uid}/podman/podman.sock: does not exist" in out.stderr
    assert "podman_autostart is off (--podman-autostart / PODMAND_PODMAN_AUTOSTART)" in out.stderr
    assert "docs/podman-api.md in podmand's repository" in out.stderr
    assert services(user) == []
    assert not Path(user.home, ".local/share/containers/storage").exists()  # nothing made a store


def serve(user: FreshUser, pex: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The pex's ``serve`` as ``user``, ready (or exited); returns it and its marker."""
    mark = uuid.uuid4().hex
    with open(log_path, "wb") as log:
        proc = user.popen([str(pex), "serve"], {"PODMAND_E2E_MARK": mark}, stdout=log, stderr=subprocess.STDOUT)
    wait_until(lambda: "ready: serving" in log_path.read_text() or proc.poll() is not None, 90.0, "podmand ready",
               lambda: log_path.read_text())
    assert proc.poll() is None, log_path.read_text()
    return proc, mark


def test_serve_starts_keeps_and_stops_podmans_api(user: FreshUser, pex_file: Path, tmp_path: Path) -> None:
    runtime = f"/tmp/podman-run-{user.uid}"
    store = Path(user.home, ".local/share/containers/storage")
    assert not Path(f"/run/user/{user.uid}").exists() and services(user) == [] and not store.exists()
    log_path = tmp_path / "serve.log"

    def logs() -> str:
        return log_path.read_text(errors="replace")

    proc, mark = serve(user, pex_file, log_path)
    try:
        started = STARTED.search(logs())
        assert started, logs()
        first = int(started.group(1))
        assert started.group(2) == f"{runtime}/podman/podman.sock"
        assert started.group(3), "a new store must be made with overlay"
        assert f"ready: serving unix://{runtime}/podmand/compute-driver.sock" in logs()
        assert os.stat(runtime).st_mode & 0o077 == 0 and os.stat(runtime).st_uid == user.uid

        health = user.run([str(pex_file), "health"])
        expected = f"{runtime}/podmand/compute-driver.sock: SERVING"  # found at the same default path
        assert (health.returncode, health.stdout.strip()) == (0, expected), health.stdout + health.stderr
        # The store is overlay, also for the user's own podman CLI (the driver is recorded in the store).
        info = user.run(["podman", "info", "--format", "{{.Store.GraphDriverName}}"])
        assert info.stdout.strip() == "overlay", info.stdout + info.stderr
        assert (store / "overlay").is_dir() and not (store / "vfs").exists()

        # A service that exits while podmand serves is restarted, and podmand serves again through it.
        os.kill(first, signal.SIGTERM)
        restarted = wait_until(lambda: RESTARTED.search(logs()), 30.0, "the service to be restarted", logs)
        second = int(restarted.group(1))
        assert second != first and not Path(f"/proc/{first}").exists()
        assert f"Podman's API service (pid {first}) exited" in logs()
        wait_until(lambda: user.run([str(pex_file), "health"]).stdout.strip() == expected, 30.0, "SERVING again")

        [podmand] = marked(user, mark)
        os.kill(podmand, signal.SIGTERM)
        assert proc.wait(30) == 0, logs()
    finally:
        for pid in marked(user, mark):
            os.kill(pid, signal.SIGKILL)
    assert f"Podman's API service (pid {second}) stopped" in logs()
    assert not Path(f"/proc/{second}").exists()
    assert services(user) == []  # the service and the process it runs in its user namespace
    assert not Path(f"{runtime}/podman/podman.sock").exists()

    # Again, with the store there now: Podman keeps its driver, no flag is passed. A podmand
    # killed outright (no clean-up at all) takes the service along (PR_SET_PDEATHSIG).
    proc, mark = serve(user, pex_file, log_path)
    try:
        again = STARTED.search(logs())
        assert again and not again.group(3), logs()
        [podmand] = marked(user, mark)
        os.kill(podmand, signal.SIGKILL)
        proc.wait(30)
        wait_until(lambda: services(user) == [], 10.0, "the service to end with its podmand", lambda: services(user))
    finally:
        for pid in marked(user, mark):
            os.kill(pid, signal.SIGKILL)
