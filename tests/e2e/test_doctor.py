"""``podmand doctor`` (the pex) on the healthy test setup, and on a deliberately broken user."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import podman
import pytest

from tests.e2e.conftest import Podmand, wait_until


def by_name(output: str) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in json.loads(output)}


def test_healthy_setup_has_no_fail(make_podmand: Callable[..., Podmand], podman_client: podman.PodmanClient) -> None:
    daemon = make_podmand(start=False)
    proc = subprocess.run(daemon.command("doctor", "--json"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = by_name(proc.stdout)
    assert [c for c in checks.values() if c["status"] == "FAIL"] == []
    for name in ("podman socket", "subuids", "tun", "storage", "images", "state dir"):
        assert checks[name]["status"] == "OK", checks[name]
    assert daemon.env["OPENSHELL_PODMAN_SOCKET"] in checks["podman socket"]["finding"]
    room = re.search(r"room for (\d+) userns=auto sandboxes", checks["subuids"]["finding"])
    assert room and int(room.group(1)) >= 200, checks["subuids"]
    assert "overlay" in checks["storage"]["finding"]
    assert "Podman sees it at the same path" in checks["state dir"]["finding"]
    # The probe left nothing behind: no container, no file in the state dir.
    assert podman_client.containers.list(all=True, filters={"label": "io.podmand.doctor"}) == []
    assert list(daemon.state_dir.iterdir()) == []

    human = subprocess.run(daemon.command("doctor"), capture_output=True, text=True, timeout=120)
    assert human.returncode == 0
    assert re.search(r"^OK    subuids: user 'podmand': ", human.stdout, re.M), human.stdout


def _api_up(sock: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(sock)
            s.sendall(b"GET /_ping HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False


SERVE = 'mkdir -p "$(dirname "$1")" && exec podman system service --time=0 "unix://$1"'


def as_user(name: str, env: dict[str, str], *cmd: str) -> list[str]:
    """Run as ``name`` with only ``env`` (runuser keeps root's variables otherwise)."""
    return ["runuser", "-u", name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *cmd]


@contextlib.contextmanager
def broken_user() -> Iterator[tuple[str, dict[str, str]]]:
    """A throwaway user with no subuid range and a vfs storage.conf; removed afterwards."""
    name = f"pdoc{uuid.uuid4().hex[:6]}"
    subprocess.run(
        ["useradd", "-m", "-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0", name], check=True, capture_output=True
    )
    entry = pwd.getpwnam(name)
    runtime = Path(f"/run/user/{entry.pw_uid}")
    try:
        runtime.mkdir(mode=0o700, exist_ok=True)
        os.chown(runtime, entry.pw_uid, entry.pw_gid)
        conf = Path(entry.pw_dir) / ".config" / "containers"
        conf.mkdir(parents=True)
        (conf / "storage.conf").write_text('[storage]\ndriver = "vfs"\n')
        for d in (conf.parent, conf, conf / "storage.conf"):
            os.chown(d, entry.pw_uid, entry.pw_gid)
        env = {
            "HOME": entry.pw_dir,
            "USER": name,
            "LOGNAME": name,
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": str(runtime),
        }
        yield name, env
    finally:
        # Everything this user runs was started by this test: end it by pid, then remove the user.
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if proc.stat().st_uid == entry.pw_uid:
                        os.kill(int(proc.name), signal.SIGKILL)
        subprocess.run(["userdel", "-r", name], capture_output=True)
        shutil.rmtree(runtime, ignore_errors=True)


def test_broken_setup_names_each_problem_and_fix(pex_file: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("needs root: it creates a user and changes /dev/net/tun")
    tun_mode = os.stat("/dev/net/tun").st_mode & 0o777
    with broken_user() as (name, env):
        sock = f"{env['XDG_RUNTIME_DIR']}/podman/podman.sock"
        log = tmp_path / "podman.log"
        service: subprocess.Popen[bytes] | None = None
        try:
            with open(log, "wb") as out:
                service = subprocess.Popen(
                    as_user(name, env, "/bin/sh", "-c", SERVE, "sh", sock),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd="/",  # rootless podman returns to the caller's directory: it may be private
                )
            started = wait_until(lambda: _api_up(sock) or service.poll() is not None, 30.0, "podman service")
            service_up = started is True and _api_up(sock)
            print(f"podman service for {name} (no subuids, vfs) up: {service_up}; log: {log.read_text()[-500:]}")
            os.chmod("/dev/net/tun", 0o600)
            doctor = as_user(
                name,
                {**env, "OPENSHELL_PODMAN_SOCKET": sock, "OPENSHELL_SANDBOX_IMAGE": "localhost/podmand-test/sandbox:1"},
                str(pex_file),
                "doctor",
            )
            human = subprocess.run(doctor, capture_output=True, text=True, timeout=120)
            as_json = subprocess.run([*doctor, "--json"], capture_output=True, text=True, timeout=120)
        finally:
            os.chmod("/dev/net/tun", tun_mode or 0o666)
            if service is not None and service.poll() is None:
                os.killpg(service.pid, signal.SIGTERM)
                service.wait(30)
    print(human.stdout + human.stderr)
    assert human.returncode == 1, human.stdout + human.stderr
    assert as_json.returncode == 1
    checks = by_name(as_json.stdout)

    assert checks["subuids"]["status"] == "FAIL"
    assert f"usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {name}" in checks["subuids"]["fix"]
    assert checks["tun"]["status"] == "FAIL"
    assert "chmod 0666 /dev/net/tun" in checks["tun"]["fix"]
    if service_up:
        assert checks["podman socket"]["status"] == "OK"
        assert checks["storage"]["status"] == "WARN"
        assert "vfs" in checks["storage"]["finding"]
        assert "storage.conf" in checks["storage"]["fix"]
        assert checks["images"]["status"] == "WARN"  # a new store holds no images
    else:
        assert checks["podman socket"]["status"] == "FAIL"
        assert sock in checks["podman socket"]["finding"]
    # The human output carries the same findings and fixes (the state dir's says "created" only once).
    for c in (checks[n] for n in ("podman socket", "subuids", "tun", "storage")):
        line = f"{c['status']:<4}  {c['name']}: {c['finding']}"
        assert line in human.stdout
        if c["status"] != "OK":
            assert f"      fix: {c['fix']}" in human.stdout
