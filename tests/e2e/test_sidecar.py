"""The sidecar image: built from containers/Containerfile on a local Python base
(no registry), run next to rootless Podman with its socket mounted in."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import podman
import pytest

from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc

from .conftest import ROOT, SANDBOX_IMAGE, SUPERVISOR_IMAGE, USER, Watch, containers_of, sandbox, wait_until

BASE = "localhost/podmand-test/python:3.11"
IMAGE = "localhost/podmand:test"


def as_user(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    entry = pwd.getpwnam(USER)
    env = ["env", "-i", f"HOME={entry.pw_dir}", "PATH=/usr/bin:/bin", f"XDG_RUNTIME_DIR=/run/user/{entry.pw_uid}"]
    # cwd /: rootless podman returns to the caller's directory, which may be private (the checkout).
    return subprocess.run(["runuser", "-u", USER, "--", *env, *args], capture_output=True, text=True,
                          check=check, timeout=timeout, cwd="/")


@pytest.fixture(scope="session")
def sidecar_image(pex_file: Path) -> str:
    """Build the Containerfile as the rootless user, from a copy of the context it can read."""
    subprocess.run(["bash", str(ROOT / "tests" / "images" / "pybase.sh")], check=True, capture_output=True)
    ctx = Path(tempfile.mkdtemp(prefix="podmand-ctx-"))
    (ctx / "dist").mkdir()
    (ctx / "containers").mkdir()
    shutil.copy(pex_file, ctx / "dist" / "podmand.pex")
    shutil.copy(ROOT / "containers" / "Containerfile", ctx / "containers" / "Containerfile")
    subprocess.run(["chmod", "-R", "a+rX", str(ctx)], check=True)
    as_user("podman", "build", "-q", "--format", "docker", "--network", "none", "--from", BASE,
            "-f", str(ctx / "containers" / "Containerfile"), "-t", IMAGE, str(ctx))
    shutil.rmtree(ctx)
    return IMAGE


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
            *extra, IMAGE)


def test_sidecar_serves_and_sandbox_gets_ready(sidecar_image: str, shared: Path, podman_socket: str,
                                               podman_client: podman.PodmanClient, cleanup: list[str]) -> None:
    """The sidecar serves on the shared socket, its HEALTHCHECK passes, and a sandbox reaches Ready=True."""
    name = "podmand-sidecar-test"
    state = shared / "state"
    try:
        # This test's client is host root, which the rootless sidecar's user namespace
        # shows as the overflow uid 65534: the peer check refuses it unless allowed.
        run_sidecar(name, podman_socket, f"{state}:{state}", shared, "-e", f"PODMAND_STATE_DIR={state}",
                    "-e", "PODMAND_ALLOWED_PEER_UIDS=65534")
        sock = shared / "run" / "compute-driver.sock"
        wait_until(sock.exists, 60, "the sidecar's driver socket")
        assert as_user("podman", "healthcheck", "run", name, check=False).returncode == 0
        stub = pb_grpc.ComputeDriverStub(grpc.insecure_channel(f"unix://{sock}"))
        watch = Watch(stub)
        box = sandbox(token=True)
        cleanup.append(box.id)
        stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        watch.wait_reason(box.id, "ContainerRunning", timeout=60)
        [container] = containers_of(podman_client, box.id)
        assert container.status == "running"
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
