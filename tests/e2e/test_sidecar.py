"""The sidecar image: built from containers/Containerfile on a local Python base
(no registry), run next to rootless Podman with its socket mounted in."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc

from .conftest import (
    ROOT,
    RUNTIME_IMAGE,
    SANDBOX_IMAGE,
    SUPERVISOR_IMAGE,
    USER,
    Watch,
    containers_of,
    sandbox,
    wait_until,
)

BASE = "localhost/podmand-test/python:3.11"
IMAGE = "localhost/podmand:test"


def as_user(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    entry = pwd.getpwnam(USER)
    env = ["env", "-i", f"HOME={entry.pw_dir}", "PATH=/usr/bin:/bin", f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}"]
    # cwd /: rootless podman returns to the caller's directory, which may be private (the checkout).
    return subprocess.run(["runuser", "-u", USER, "--", *env, *args], capture_output=True, text=True,
                          check=check, timeout=timeout, cwd="/")


@pytest.fixture(scope="session")
def python_base() -> str:
    """A local Python base without any registry (docs/deployment.md's debootstrap + podman import)."""
    subprocess.run(["bash", str(ROOT / "tests" / "images" / "pybase.sh")], check=True, capture_output=True)
    return BASE


def checkout_copy(pex: Path) -> Path:
    """A readable stand-in for the checkout after ./build_pex.sh: its real .containerignore and
    Containerfile, the pex, and a file in every top-level entry of the checkout plus the build's
    other outputs and caches (none of which belongs in the build context)."""
    ctx = Path(tempfile.mkdtemp(prefix="podmand-ctx-"))
    for entry in ROOT.iterdir():
        target = ctx / entry.name
        if entry.is_dir() or entry.name == ".git":  # a worktree's .git is a file: a directory stands in
            target.mkdir()
            (target / "decoy").write_text("not for the build context\n")
        else:
            target.write_text("not for the build context\n")
    for decoy in ("dist/podmand-0.1.0-x86_64.pex", "dist/podmand-0.1.0-aarch64.pex", "dist/SHA256SUMS",
                  "podmand/__pycache__/server.cpython-311.pyc", ".git/HEAD", "build/lib/podmand/x.py"):
        (ctx / decoy).parent.mkdir(parents=True, exist_ok=True)
        (ctx / decoy).write_text("not for the build context\n")
    shutil.copy(ROOT / ".containerignore", ctx / ".containerignore")
    shutil.copy(ROOT / "containers" / "Containerfile", ctx / "containers" / "Containerfile")
    shutil.copy(pex, ctx / "dist" / "podmand.pex")
    subprocess.run(["chmod", "-R", "a+rX", str(ctx)], check=True)
    return ctx


@pytest.fixture(scope="session")
def sidecar_image(pex_file: Path, python_base: str) -> str:
    """docs/deployment.md's build, as the rootless user, in a copy of the checkout it can read."""
    ctx = checkout_copy(pex_file)
    try:
        as_user("podman", "build", "-q", "--format", "docker", "--network", "none", "--from", python_base,
                "-f", str(ctx / "containers" / "Containerfile"), "-t", IMAGE, str(ctx))
    finally:
        shutil.rmtree(ctx)
    return IMAGE


def test_build_context_is_only_the_pex(python_base: str) -> None:
    """.containerignore keeps everything but dist/podmand.pex out of the build context: a
    Containerfile that copies the whole context gets the pex and nothing else."""
    ctx = checkout_copy(Path(__file__))  # any file stands in for the pex here
    listing = ctx / "containers" / "Containerfile.context"  # ignored itself, as containers/Containerfile is
    listing.write_text("FROM scratch\nCOPY . /context\nRUN find /context -type f | sort\n")
    os.chmod(listing, 0o644)
    try:
        out = as_user("podman", "build", "--network", "none", "--from", python_base, "--no-cache",
                      "-f", str(listing), "-t", "localhost/podmand-context:test", str(ctx)).stdout
    finally:
        shutil.rmtree(ctx)
        as_user("podman", "rmi", "-f", "localhost/podmand-context:test", check=False)
    assert [line for line in out.splitlines() if line.startswith("/context")] == ["/context/dist/podmand.pex"], out


@pytest.fixture
def shared() -> Iterator[Path]:
    """A host directory for the sidecar's state and socket, owned by the rootless user."""
    d = Path(tempfile.mkdtemp(prefix="podmand-sidecar-"))
    os.chmod(d, 0o755)
    for sub in ("state", "run"):
        (d / sub).mkdir()
    subprocess.run(["chown", "-R", USER, str(d)], check=True)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# Rootless: the container's root is the unprivileged host user (userns=host), so it can use the
# Podman socket and own the files it writes; keep-id would claim every subordinate id and leave
# none for the sandboxes' userns=auto.
SIDECAR_USER = ["--userns=host", "--user=0:0", "--network", "none"]


def run_sidecar(name: str, podman_socket: str, state_mount: str, shared: Path, *extra: str) -> None:
    as_user("podman", "run", "-d", "--name", name, *SIDECAR_USER,
            "-v", f"{podman_socket}:/run/podman/podman.sock", "-v", state_mount, "-v", f"{shared / 'run'}:/run/podmand",
            "-e", f"OPENSHELL_SUPERVISOR_IMAGE={SUPERVISOR_IMAGE}", "-e", f"OPENSHELL_SANDBOX_IMAGE={SANDBOX_IMAGE}",
            "-e", f"OPENSHELL_SANDBOX_RUNTIME_IMAGE={RUNTIME_IMAGE}",
            *extra, IMAGE)


def test_sidecar_serves_and_sandbox_gets_ready(sidecar_image: str, shared: Path, podman_socket: str,
                                               podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """The sidecar serves on the shared socket, its HEALTHCHECK passes, and a sandbox reaches Ready=True:
    its pair runs, the runtime binary extracted into the shared state directory."""
    name = "podmand-sidecar-test"
    state = shared / "state"
    try:
        # This test's client is host root, which the rootless sidecar's user namespace
        # shows as the overflow uid 65534: the peer check refuses it unless allowed.
        run_sidecar(name, podman_socket, f"{state}:{state}", shared, "-e", f"PODMAND_STATE_DIR={state}",
                    "-e", "PODMAND_ALLOWED_PEER_UIDS=65534")
        sock = shared / "run" / "compute-driver.sock"
        wait_until(sock.exists, 60, "the sidecar's driver socket")
        # The socket accepts before start-up is done; health says SERVING once it is.
        wait_until(lambda: as_user("podman", "healthcheck", "run", name, check=False).returncode == 0, 60,
                   "the sidecar's HEALTHCHECK to pass")
        stub = pb_grpc.ComputeDriverStub(grpc.insecure_channel(f"unix://{sock}"))
        watch = Watch(stub)
        box = sandbox()
        cleanup.append(box.id)
        stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        watch.wait_reason(box.id, "ContainerRunning", timeout=60)
        [container] = containers_of(podman_client, box.id)
        [supervisor] = containers_of(podman_client, box.id, "supervisor")
        assert (container.status, supervisor.status) == ("running", "running")
        assert stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=box.id)).deleted
        watch.cancel()
    finally:
        as_user("podman", "rm", "-f", "-t", "5", name, check=False)


def test_mismounted_state_dir_refuses_with_fix(sidecar_image: str, shared: Path, podman_socket: str) -> None:
    """State mounted at another path than on the host: podmand refuses to serve and says how to fix it."""
    result = as_user("podman", "run", "--rm", *SIDECAR_USER, "-v", f"{podman_socket}:/run/podman/podman.sock",
                     "-v", f"{shared / 'state'}:/var/lib/podmand", "-v", f"{shared / 'run'}:/run/podmand",
                     sidecar_image, check=False)
    assert result.returncode == 1
    assert "cannot see podmand's state directory /var/lib/podmand" in result.stderr
    assert "mount the host directory at the identical path" in result.stderr
    assert not (shared / "run" / "compute-driver.sock").exists()


def test_readiness_reaches_systemd_through_podman(sidecar_image: str, shared: Path, podman_socket: str) -> None:
    """containers/systemd/podmand.container says Notify=true, which Quadlet runs as
    --sdnotify=container: podmand's READY=1 from inside reaches the unit's NOTIFY_SOCKET
    through Podman, after podmand serves."""
    unit = (ROOT / "containers" / "systemd" / "podmand.container").read_text().splitlines()
    assert "Notify=true" in unit
    name = "podmand-sidecar-notify"
    state = shared / "state"
    path = str(shared / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        os.chmod(path, 0o666)
        sock.settimeout(60)
        try:
            as_user("env", f"NOTIFY_SOCKET={path}", "podman", "run", "-d", "--name", name, "--sdnotify=container",
                    *SIDECAR_USER, "-v", f"{podman_socket}:/run/podman/podman.sock", "-v", f"{state}:{state}",
                    "-e", f"PODMAND_STATE_DIR={state}", "-v", f"{shared / 'run'}:/run/podmand", IMAGE)
            while (message := sock.recv(4096).decode()).startswith("MAINPID="):
                continue  # Podman's own: conmon's pid
            # podmand sends READY=1 and its STATUS line in one datagram: conmon 2.1.6 (with
            # Podman 4.3.1) passes on READY=1 alone, Debian 13's (with 5.4.2) the whole of it.
            lines = message.split("\n")
            assert lines[0] == "READY=1", message
            assert all(line.startswith("STATUS=serving unix://") for line in lines[1:]), message
            assert "ready: serving" in as_user("podman", "logs", name).stderr
        finally:
            as_user("podman", "rm", "-f", "-t", "5", name, check=False)


CACHE_REPORT = """
import importlib.util, json, os
loose, stale, otel = [], [], []
for top, dirs, files in os.walk("/opt/podmand/pex"):
    for name in dirs + files:
        path = os.path.join(top, name)
        st = os.lstat(path)
        if st.st_uid != 0 or st.st_mode & 0o022:
            loose.append("%s %o %d" % (path, st.st_mode, st.st_uid))
        if name.endswith(".py") and not os.path.exists(importlib.util.cache_from_source(path)):
            stale.append(path)
        if name == ".otel":
            otel.append(path)
print(json.dumps({"loose": loose, "stale": stale, "otel": otel}))
"""


def test_the_images_pex_cache_is_roots_and_every_uid_starts_warm(sidecar_image: str) -> None:
    """The image's PEX_ROOT is root's and writable by no one else, with OpenTelemetry's wheels and a
    .pyc for every module already in it (it was a+rwX, writable by every uid in the container):
    the image's own user, --user 0:0 and any other uid start from it without unpacking anything,
    traces on or not."""
    report = json.loads(as_user("podman", "run", "--rm", "--network", "none", "--entrypoint", "python3",
                                sidecar_image, "-c", CACHE_REPORT).stdout)
    assert not report["loose"], report["loose"][:10]
    assert not report["stale"], report["stale"][:10]
    assert len(report["otel"]) == 1, report["otel"]
    for user in ([], ["--user", "0:0"], ["--user", "4321:4321"]):
        run = ["podman", "run", "--rm", "--network", "none", "-e", "PEX_VERBOSE=1", *user, sidecar_image]
        version = as_user(*run, "--version", check=False)
        assert version.returncode == 0, version.stderr[-2000:]
        assert version.stdout.startswith("podmand "), version.stdout
        assert "unpack" not in version.stderr, version.stderr
    traced = as_user("podman", "run", "--rm", "--network", "none", "-e", "PEX_VERBOSE=1", sidecar_image, "serve",
                     "--otlp-endpoint", "http://127.0.0.1:9", "--podman-socket", "/nonexistent",
                     "--socket", "/tmp/d.sock", "--state-dir", "/tmp/state", check=False)
    assert traced.returncode == 1 and "traces: exporting spans" in traced.stderr, traced.stderr[-2000:]
    assert "unpack" not in traced.stderr, traced.stderr
