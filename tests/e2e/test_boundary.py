"""The pex's boundary: who may use the driver socket (SO_PEERCRED), the capability
bits it advertises, and its error boundary (start-up failures, bad requests, bugs).

podmand runs as the rootless user ``podmand``; a foreign uid (``nobody``) connects
for real, so the kernel records that uid on the connection. The socket's 0700
directory would stop ``nobody`` before podmand ever saw it, so these tests loosen
the modes by hand: exactly the mistake the peer check exists for.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import grpc

from podmand._proto import compute_driver_pb2 as pb
from tests.fakes.libpod import FakeLibpod

from .conftest import ROOT, USER, Podmand, gateway_metadata, sandbox, wait_until

NOBODY = pwd.getpwnam("nobody").pw_uid

# Loads everything first (as root: the interpreter lives under /root), then drops to the
# given uid and only then connects (channels connect lazily, on the first call):
# SO_PEERCRED records the uid of the connect().
CLIENT = """
import os, sys, grpc
from podmand._proto import compute_driver_pb2 as pb, compute_driver_pb2_grpc as pb_grpc
uid = int(sys.argv[2])
channel = grpc.insecure_channel("unix://" + sys.argv[1])
stub = pb_grpc.ComputeDriverStub(channel)
os.setgroups([]); os.setgid(uid if uid else 0); os.setuid(uid)
assert os.getuid() == os.geteuid() == uid
try:
    stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=10)
    print(os.getpid(), "OK", "-")
except grpc.RpcError as exc:
    print(os.getpid(), exc.code().name, exc.details())
"""


def call_as(uid: int, socket_path: str) -> tuple[int, str, str]:
    """ListSandboxes from a process running as ``uid``: (its pid, status code name, details)."""
    gid = pwd.getpwuid(uid).pw_gid
    script = CLIENT.replace("os.setgid(uid if uid else 0)", f"os.setgid({gid})")
    out = subprocess.run([sys.executable, "-c", script, socket_path, str(uid)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    pid, code, details = out.stdout.strip().split(" ", 2)
    return int(pid), code, details


def expose(daemon: Podmand) -> None:
    """Let any uid reach the socket (dir 0711, socket 0666): file modes no longer protect it."""
    os.chmod(Path(daemon.socket).parent, 0o711)
    os.chmod(daemon.socket, 0o666)


def test_foreign_uid_is_refused_and_named(make_podmand: Callable[..., Podmand]) -> None:
    """nobody: PERMISSION_DENIED and one log line naming its uid and pid; podmand's own
    uid and root are served on the same socket."""
    daemon = make_podmand()
    expose(daemon)
    pid, code, details = call_as(NOBODY, daemon.socket)
    assert code == "PERMISSION_DENIED", details
    assert "PODMAND_ALLOWED_PEER_UIDS" in details
    wait_until(lambda: f"refused a connection from uid {NOBODY} (pid {pid})" in daemon.logs(), 10,
               "the refusal log line")
    assert daemon.logs().count(f"uid {NOBODY} (pid {pid})") == 1
    assert call_as(pwd.getpwnam(USER).pw_uid, daemon.socket)[1] == "OK"
    assert call_as(0, daemon.socket)[1] == "OK"
    assert "refused a connection from uid 0" not in daemon.logs()
    # The grpc servers behind the gate sit in a 0700 directory: not a way around the check.
    [internal] = Path(daemon.socket).parent.glob(f".{Path(daemon.socket).name}.*")  # this daemon's own
    assert os.stat(internal).st_mode & 0o777 == 0o700
    _, code, _ = call_as(NOBODY, str(internal / "grpc.sock"))
    assert code == "UNAVAILABLE"


def test_allowed_peer_uid_is_served(make_podmand: Callable[..., Podmand]) -> None:
    daemon = make_podmand({"PODMAND_ALLOWED_PEER_UIDS": f"4242,{NOBODY}"})
    expose(daemon)
    _, code, details = call_as(NOBODY, daemon.socket)
    assert code == "OK", details
    assert f"uid {NOBODY}" not in daemon.logs()


def test_capability_bits(make_podmand: Callable[..., Podmand]) -> None:
    """Only what is proven: with no CDI devices, no GPU count or default selection (with
    devices: tests/e2e/test_resources.py)."""
    driver = make_podmand({"PODMAND_CDI_SPEC_DIRS": "/nonexistent/podmand-e2e-cdi"})
    caps = driver.stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway_metadata()))
    gpu = caps.resource_capabilities.gpu
    assert (gpu.count_selection_supported, gpu.default_selection_supported) == (False, False)
    # the gateway verifies its own session tokens (contract §1.2): podmand mints no credential
    assert caps.supports_sandbox_authentication is False
    assert caps.driver_reports_runtime_readiness is False
    box = sandbox(resource_requirements=pb.ResourceRequirements(gpu=pb.GpuResourceRequirements(count=1)))
    try:
        driver.stub.ValidateSandboxCreate(pb.ValidateSandboxCreateRequest(sandbox=box))
        raise AssertionError("a plain gpu.count was accepted")
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION, exc


def test_descriptor_limit_raised(driver: Podmand) -> None:
    [pid] = driver.pids()
    soft, hard = re.search(r"Max open files\s+(\d+)\s+(\d+)", Path(f"/proc/{pid}/limits").read_text()).groups()  # type: ignore[union-attr]
    assert soft == hard
    assert f"descriptor limit (RLIMIT_NOFILE): soft {soft}" in driver.logs()


def test_undecodable_request_is_invalid_argument_without_traceback(driver: Podmand) -> None:
    channel = grpc.insecure_channel(f"unix://{driver.socket}")
    try:
        for _ in range(3):
            try:
                channel.unary_unary("/openshell.compute.v1.ComputeDriver/GetSandbox")(b"\xff\xff\xff", timeout=10)
                raise AssertionError("garbage was accepted")
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
    finally:
        channel.close()
    assert driver.stub.ListSandboxes(pb.ListSandboxesRequest()) is not None
    assert "Traceback" not in driver.logs()
    assert driver.logs().count("rpc=GetSandbox code=INVALID_ARGUMENT") == 3


def test_broken_state_dir_is_a_clear_failed_precondition(driver: Podmand) -> None:
    """The state directory broken under a running podmand (its sandboxes directory replaced
    by a file): FAILED_PRECONDITION naming the directory and what the OS said, one log line,
    no traceback. (A bug is INTERNAL with a fixed message: tests/unit/test_servicer.py.)"""
    shutil.rmtree(driver.state_dir / "sandboxes")
    (driver.state_dir / "sandboxes").write_text("")
    box = sandbox()
    try:
        driver.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        raise AssertionError("create succeeded")
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION, exc
        assert exc.details().startswith(f"state directory {driver.state_dir} is not writable: Not a directory")
    # The client has the status before the server's RPC line is written: wait for the line.
    line = f"rpc=CreateSandbox sandbox={box.id} code=FAILED_PRECONDITION"
    wait_until(lambda: line in driver.logs(), 10, "the RPC log line")
    assert "Traceback" not in driver.logs() and "code=INTERNAL" not in driver.logs()


# ---------------------------------------------------------------- start-up failures


def failed_start(daemon: Podmand, needle: str) -> None:
    """Exit 1 with one ``podmand: …`` line, no traceback, no socket or socket dir, lock free."""
    result = subprocess.run(daemon.command("serve"), capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("podmand: ")]
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not Path(daemon.socket).parent.exists()  # the run dir podmand would have created
    lock = daemon.state_dir / "podmand.lock"
    assert not lock.exists() or lock.read_text() == ""


def test_a_removed_setting_stops_the_start_naming_it(make_podmand: Callable[..., Podmand]) -> None:
    """An operator's configuration still asking for the single-container layout (gone with
    issue 31): one line naming the setting, its flag and variable, and what to do; nothing
    served. An older podmand's credential key left in the state directory is no concern."""
    daemon = make_podmand(start=False)
    daemon.state_dir.mkdir(mode=0o700)
    (daemon.state_dir / "credential.key").write_bytes(b"\x00" * 32)
    shutil.chown(daemon.state_dir, USER, USER)
    daemon.env["PODMAND_TOPOLOGY"] = "single"
    result = subprocess.run(daemon.command("serve"), capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.startswith("podmand: ")]
    assert result.returncode == 2 and len(lines) == 1, result.stderr  # a configuration error
    assert "setting topology (--topology / PODMAND_TOPOLOGY) was removed" in lines[0]
    assert "Traceback" not in result.stderr and not Path(daemon.socket).exists()


def test_socket_path_of_108_bytes(make_podmand: Callable[..., Podmand]) -> None:
    daemon = make_podmand(start=False)
    base = daemon.workdir / "run"
    long = str(base / ("s" * (108 - len(str(base)) - 1)))
    daemon.socket = daemon.env["OPENSHELL_COMPUTE_DRIVER_SOCKET"] = long
    failed_start(daemon, f"driver socket path {long!r} is 108 bytes; Unix sockets allow at most 107")
    assert not daemon.state_dir.exists()


def test_socket_directory_the_user_cannot_create(make_podmand: Callable[..., Podmand]) -> None:
    """A --socket under a directory of root's: one line naming the directory, no traceback."""
    daemon = make_podmand(start=False)
    locked = daemon.workdir / "locked"
    locked.mkdir(mode=0o755)  # root's: the rootless user cannot create anything in it
    daemon.socket = daemon.env["OPENSHELL_COMPUTE_DRIVER_SOCKET"] = str(locked / "run" / "driver.sock")
    failed_start(daemon, f"cannot create the driver socket directory {locked / 'run'}: Permission denied")
    assert not (locked / "run").exists()


def test_unwritable_state_dir(make_podmand: Callable[..., Podmand]) -> None:
    daemon = make_podmand(start=False)
    daemon.state_dir.mkdir(mode=0o555)  # root's: the rootless user cannot write it
    failed_start(daemon, f"state directory {daemon.state_dir} is not usable")


def test_podman_answering_garbage(make_podmand: Callable[..., Podmand]) -> None:
    """A socket that answers /_ping but not with Podman's /info (run as root: the fake is root's)."""
    tmp = Path(tempfile.mkdtemp(prefix="pdb-", dir="/tmp"))
    fake = FakeLibpod().start_in_thread(str(tmp / "podman.sock"))
    fake.route("GET", "/info", (200, {}, b"\x00garbage"))
    try:
        daemon = make_podmand({"OPENSHELL_PODMAN_SOCKET": fake.path}, start=False, user=None, socket=fake.path)
        failed_start(daemon, "answered /info with something that is not Podman's system info")
    finally:
        fake.stop_thread()
        shutil.rmtree(tmp, ignore_errors=True)
