"""``podmand doctor`` (the pex) on the healthy test setup, and on a deliberately broken user."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import podman
import pytest

from tests.e2e.conftest import Podmand, wait_until
from tests.e2e.freshuser import fresh_user


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
    # Capacity: the ids bound it (a workload has no network, so no network figure).
    figure = {n: checks[f"capacity: {n}"] for n in ("subordinate ids", "kernel keys", "descriptors")}
    assert all(c["status"] == "OK" for c in figure.values()), figure
    assert figure["subordinate ids"]["finding"].startswith(f"{room.group(1)} sandboxes: "), figure
    assert "capacity: network" not in checks
    assert checks["capacity"]["finding"] == f"{room.group(1)} sandboxes at once (bounded by subordinate ids)"
    assert checks["runtime dir"]["status"] == "OK", checks["runtime dir"]
    assert checks["runtime dir"]["finding"].startswith("/run/user/")
    assert checks["quadlet"]["status"] == ("WARN" if "Podman 4.3" in checks["podman version"]["finding"] else "OK")
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
    with fresh_user("pdoc", subids=0) as user:
        runtime = Path(f"/run/user/{user.uid}")
        runtime.mkdir(mode=0o700, exist_ok=True)
        os.chown(runtime, user.uid, user.gid)
        conf = Path(user.home) / ".config" / "containers"
        conf.mkdir(parents=True)
        (conf / "storage.conf").write_text('[storage]\ndriver = "vfs"\n')
        for d in (conf.parent, conf, conf / "storage.conf"):
            os.chown(d, user.uid, user.gid)
        yield user.name, user.env({"XDG_RUNTIME_DIR": str(runtime)})


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
    assert checks["capacity"]["status"] == "WARN" and checks["capacity"]["finding"].startswith("0 sandboxes")
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


def test_fresh_user_without_a_podman_service_is_told_what_serve_does(pex_file: Path) -> None:
    """No XDG_RUNTIME_DIR, no /run/user/<uid>, no Podman service, no store, no storage.conf:
    the socket and storage findings say serve starts Podman itself, with overlay; the runtime
    directory is Podman's /tmp fallback, with the linger fix. doctor itself makes no store."""
    with fresh_user("pdoc") as user:
        out = user.run([str(pex_file), "doctor", "--json"])
        store_made = Path(user.home, ".local/share/containers/storage").exists()
        running = user.pids_of("podman")
    assert out.returncode == 0, out.stdout + out.stderr
    checks = by_name(out.stdout)
    fallback = f"/tmp/podman-run-{user.uid}"
    sock = checks["podman socket"]
    assert sock["status"] == "WARN", sock
    assert f"serve will start Podman's API itself at {fallback}/podman/podman.sock" in sock["finding"]
    runtime = checks["runtime dir"]
    assert runtime["status"] == "WARN", runtime
    assert f"Podman and podmand use {fallback}" in runtime["finding"]
    assert f"loginctl enable-linger {user.name}" in runtime["fix"]
    storage = checks["storage"]
    assert storage["status"] == "WARN", storage
    assert "would create a slow vfs store" in storage["finding"]
    assert checks["driver socket"]["finding"].startswith(f"{fallback}/podmand/compute-driver.sock is usable")
    assert not store_made and running == []
