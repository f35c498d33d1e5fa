"""The podmand under test: started as the rootless user with its own socket and state
dir under /tmp, stopped by its recorded PID; its warm start timed.

Its settings make the pair of podmand/pair/ from the stand-in images of tests/images
(the runtime image, whose binary podmand extracts and binds into each workload, and the
supervisor image); the sandbox image sandbox:1 is the Python rootfs the runtime stand-in
runs in (bench/_pair.py names them). podmand refuses a create without
``launch_authentication`` (FAILED_PRECONDITION): a bench creating sandboxes through it
sends bench/_pair.py's requests, which carry one.

``setpriv`` execs podmand in place (no runuser parent), so the PID Popen records is
podmand's own, and SIGTERM reaches it directly.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench._pair import RUNTIME_IMAGE, SANDBOX_IMAGE, STOP_TIMEOUT, SUPERVISOR_IMAGE
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand._proto import extension_pb2 as ext


def gateway() -> ext.PeerMetadata:
    return ext.PeerMetadata(
        protocol_version=ext.ProtocolVersion(major=1, minor=0),
        implementation_name="openshell/gateway",
        implementation_version="0.1.2",
        supported_capabilities=["openshell.compute.contract"],
        required_capabilities=["openshell.compute.contract"],
    )


@dataclass
class Podmand:
    """One podmand: ``pex`` (a file) or ``source`` (a checkout run with this Python)."""

    user: str
    podman_socket: str
    pex: str = ""
    source: str = ""
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="podmand-scale-")))
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)  # more of podmand's settings

    def __post_init__(self) -> None:
        pw = pwd.getpwnam(self.user)
        self.uid, self.gid, self.home = pw.pw_uid, pw.pw_gid, pw.pw_dir
        os.chmod(self.work, 0o755)
        os.chown(self.work, self.uid, self.gid)
        if self.pex:  # a copy the rootless user can read, whatever the checkout's mode
            copy = self.work / "podmand.pex"
            shutil.copy(self.pex, copy)
            os.chmod(copy, 0o755)
            self.pex = str(copy)
        self.socket = str(self.work / "run" / "driver.sock")
        self.log = self.work / "podmand.log"

    def argv(self) -> list[str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": self.home,
            "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": f"/run/user/{self.uid}",
            "OPENSHELL_COMPUTE_DRIVER_SOCKET": self.socket,
            "OPENSHELL_PODMAN_SOCKET": self.podman_socket,
            "OPENSHELL_SANDBOX_IMAGE": SANDBOX_IMAGE,
            "OPENSHELL_SANDBOX_RUNTIME_IMAGE": RUNTIME_IMAGE,
            "OPENSHELL_SUPERVISOR_IMAGE": SUPERVISOR_IMAGE,
            "OPENSHELL_STOP_TIMEOUT": str(STOP_TIMEOUT),
            "PODMAND_STATE_DIR": str(self.work / "state"),
        }
        env.update(self.env)
        run = [self.pex, "serve"]
        if self.source:
            env["PYTHONPATH"] = self.source
            run = [sys.executable, "-m", "podmand", "serve"]
        ids = [f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups"]
        return ["setpriv", *ids, "env", "-i", *[f"{k}={v}" for k, v in env.items()], *run]

    def start(self) -> tuple[float, float]:
        """Seconds from exec to the first answered GetCapabilities, and to SERVING."""
        self.stop()
        with open(self.log, "ab") as log:
            begin = time.perf_counter()
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, cwd="/")
        accepting = serving = 0.0
        channel = grpc.insecure_channel(f"unix://{self.socket}")
        try:
            stub, health = pb_grpc.ComputeDriverStub(channel), health_pb2_grpc.HealthStub(channel)
            deadline = begin + 120
            while not serving:
                if self.proc.poll() is not None:
                    raise SystemExit(f"podmand exited: {self.log.read_text()[-2000:]}")
                if time.perf_counter() > deadline:
                    raise SystemExit("podmand did not serve within 120 s")
                if not os.path.exists(self.socket):
                    time.sleep(0.002)
                    continue
                try:
                    if not accepting:
                        stub.GetCapabilities(pb.GetCapabilitiesRequest(gateway=gateway()), timeout=2)
                        accepting = time.perf_counter() - begin
                    answer = health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        serving = time.perf_counter() - begin
                except grpc.RpcError as exc:
                    if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                        accepting = accepting or time.perf_counter() - begin  # an answer, if not OK
                    time.sleep(0.002)
        finally:
            channel.close()
        return accepting, serving

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.work, ignore_errors=True)
