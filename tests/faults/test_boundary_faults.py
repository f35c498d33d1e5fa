"""The error boundary as a process: start-up failures are one ``podmand:`` line, exit 1
and leave nothing behind; bad requests and bugs never surface as UNKNOWN or tracebacks."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import grpc

from podmand._proto import compute_driver_pb2 as pb
from podmand.host.statedir import LOCK_FILE
from tests.fakes.libpod import FakeLibpod
from tests.faults import test_faults
from tests.faults.test_faults import DEADLINE, Podmand, rpc_error, sandbox

# The process fixtures of test_faults (a temp dir, the fake libpod, ``python -m podmand serve``).
launch = test_faults.launch

SERVICE = "/openshell.compute.v1.ComputeDriver"


def assert_clean_exit(d: Podmand, needle: str, run_dir: Path | None = None) -> None:
    """Exit 1, one ``podmand: …`` line carrying ``needle``, no traceback, nothing left behind."""
    assert d.wait_exit() == 1, d.log
    [line] = [line for line in d.log.splitlines() if line.startswith("podmand: ")]
    assert needle in line, d.log
    assert "Traceback" not in d.log
    assert not os.path.exists(d.socket)
    if run_dir is not None:
        assert not run_dir.exists()
    lock = d.state / LOCK_FILE
    if lock.exists():  # released: we can take it
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


def in_new_dir(tmp: Path) -> dict[str, str]:
    """A socket in a directory podmand has to create (so it must also remove it)."""
    return {"OPENSHELL_COMPUTE_DRIVER_SOCKET": str(tmp / "run" / "sub" / "d.sock")}


def test_socket_path_of_108_bytes(tmp: Path, launch: Callable[..., Podmand]) -> None:
    long = tmp / "run" / ("s" * (108 - len(str(tmp / "run")) - 1))
    assert len(str(long)) == 108
    d = launch(OPENSHELL_COMPUTE_DRIVER_SOCKET=str(long))
    d.socket = str(long)
    assert_clean_exit(d, f"driver socket path {str(long)!r} is 108 bytes; Unix sockets allow at most 107",
                      tmp / "run")
    assert not (d.state / LOCK_FILE).exists()  # refused before the state directory was touched


def test_a_removed_setting_stops_the_start_before_anything_is_made(tmp: Path, launch: Callable[..., Podmand]) -> None:
    """PODMAND_TOPOLOGY (the single-container layout is gone): a configuration error (exit 2),
    one line naming the setting and what to do, no socket directory made, the state
    directory untouched."""
    d = launch(PODMAND_TOPOLOGY="split", **in_new_dir(tmp))
    assert d.wait_exit() == 2, d.log
    [line] = [line for line in d.log.splitlines() if line.startswith("podmand: ")]
    assert "setting topology (--topology / PODMAND_TOPOLOGY) was removed" in line, d.log
    assert line.endswith("remove it from podmand's configuration") and "Traceback" not in d.log
    assert not (tmp / "run").exists() and not (d.state / LOCK_FILE).exists()


def test_podman_answering_garbage_to_info(tmp: Path, fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    fake.route("GET", "/info", (200, {}, b"<html>this is not libpod</html>"))
    d = launch(**in_new_dir(tmp))
    d.socket = str(tmp / "run" / "sub" / "d.sock")
    assert_clean_exit(d, "answered /info with something that is not Podman's system info", tmp / "run")


def test_podman_answering_wrong_json_to_info(fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    fake.route("GET", "/info", (200, {}, {"host": "not an object"}))
    assert_clean_exit(launch(), "is it a libpod API socket?")


def test_unusable_state_dir(tmp: Path, launch: Callable[..., Podmand]) -> None:
    (tmp / "file").write_text("")
    d = launch(PODMAND_STATE_DIR=str(tmp / "file" / "state"))
    assert_clean_exit(d, f"state directory {tmp}/file/state is not usable")


def test_descriptor_limit_raised_to_hard(fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    d = launch(OPENSHELL_LOG_LEVEL="debug").wait_ready()
    limits = Path(f"/proc/{d.proc.pid}/limits").read_text()
    soft, hard = re.search(r"Max open files\s+(\d+)\s+(\d+)", limits).groups()  # type: ignore[union-attr]
    assert soft == hard
    assert f"descriptor limit (RLIMIT_NOFILE): soft {soft}" in d.log


def test_undecodable_requests_are_invalid_argument_without_tracebacks(
        fake: FakeLibpod, launch: Callable[..., Podmand]) -> None:
    """Raw garbage to every unary method (and health): INVALID_ARGUMENT, one WARNING line
    each, no ERROR or traceback; the server keeps serving."""
    d = launch().wait_ready()
    channel = grpc.insecure_channel(f"unix://{d.socket}")
    methods = [f"{SERVICE}/{m}" for m in ("GetCapabilities", "ValidateSandboxCreate", "CreateSandbox", "GetSandbox",
                                          "ListSandboxes", "StopSandbox", "StartSandbox", "DeleteSandbox",
                                          "EnsureWorkspace", "DeleteWorkspace", "AuthenticateSandbox")]
    methods.append("/grpc.health.v1.Health/Check")
    try:
        for method in methods:
            err = rpc_error(lambda m=method: channel.unary_unary(m)(b"\xff\xff\xff\xff", timeout=5))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err)
            assert "not a valid protobuf message" in (err.details() or "")
        stream = channel.unary_stream(f"{SERVICE}/WatchSandboxes")(b"\x0a\xff", timeout=5)
        err = rpc_error(lambda: next(iter(stream)))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        channel.close()
    assert list(d.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=5).sandboxes) == []
    assert "Traceback" not in d.log and " ERROR " not in d.log, d.log
    assert d.log.count("code=INVALID_ARGUMENT") == len(methods) + 1


def test_a_broken_state_dir_is_a_clear_failed_precondition(tmp: Path, fake: FakeLibpod,
                                                            launch: Callable[..., Podmand]) -> None:
    """The state directory broken under a running podmand: FAILED_PRECONDITION naming it and
    what the OS said (never INTERNAL, UNKNOWN or code=OK), one log line without a traceback;
    nothing of the request is left and podmand keeps serving. (A bug's INTERNAL:
    tests/unit/test_servicer.py.)"""
    d = launch().wait_ready()
    shutil.rmtree(d.state / "sandboxes")
    (d.state / "sandboxes").write_text("not a directory any more")
    asked = len(fake.requests)
    err = rpc_error(lambda: d.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=sandbox("sb1")), timeout=DEADLINE))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
    assert (err.details() or "").startswith(f"state directory {d.state} is not writable: Not a directory")
    # The client has the status before the server's RPC line is written: wait for the line.
    line = "rpc=CreateSandbox sandbox=sb1 code=FAILED_PRECONDITION"
    test_faults.wait_until(lambda: line in d.log, "the RPC log line")
    assert "code=OK" not in d.log.split("rpc=CreateSandbox sandbox=sb1", 1)[1].splitlines()[0]
    assert "code=UNKNOWN" not in d.log and "code=INTERNAL" not in d.log and "Traceback" not in d.log
    assert not [r for r in fake.requests[asked:] if "/create" in r] and fake.volumes == {}  # nothing in Podman
    assert d.stub.ListSandboxes(pb.ListSandboxesRequest(), timeout=5) is not None  # still serving
