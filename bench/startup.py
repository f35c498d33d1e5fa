"""Cold and warm start of the pex: ``--version``, time until ``serve`` accepts and until
it is SERVING, its idle RSS, and the operator's ``ctl list`` and ``ctl get`` against it.

    python3 bench/startup.py [--pex dist/podmand.pex] [--podman /run/podman/podman.sock] [-n 5]

Cold: an empty PEX_ROOT (the pex unpacks its wheels first). Warm: the same PEX_ROOT
again. ``serve`` runs against a live Podman; "accepting" is the first GetCapabilities
answered, "SERVING" the first health check saying so (both polled every 5 ms from
the start of the process); the idle RSS is read once it has served for a second with
nothing to do. Then ``ctl list`` (no sandboxes) and ``ctl get`` (of an id it does not
have: NOT_FOUND, exit 1) run against it, each a whole process of the pex with its venv
already unpacked (in the cold column the first use of ctl's own modules, which serve did
not import, still compiles them). The process is then stopped with SIGTERM. Runs
the pex with an empty environment, as an operator would.

Anchors, measured in the same rounds: for ``--version``, an interpreter that does nothing
(``python3 -I -c pass``); for SERVING, the libpod calls ``serve`` waits on made raw from a
process that has started already (``_startup_raw.py``), so the ratio is what podmand's
process adds to Podman's own answers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the generated protos, for GetCapabilities

from bench._startup_raw import startup_calls  # noqa: E402
from podmand._proto import compute_driver_pb2 as pb  # noqa: E402
from podmand._proto import compute_driver_pb2_grpc as pb_grpc  # noqa: E402
from podmand._proto import extension_pb2 as ext  # noqa: E402

CAPABILITIES = pb.GetCapabilitiesRequest(gateway=ext.PeerMetadata(
    protocol_version=ext.ProtocolVersion(major=1, minor=0), implementation_name="bench",
    implementation_version="0", supported_capabilities=["openshell.compute.contract"],
    required_capabilities=["openshell.compute.contract"]))
IDLE = 1.0  # seconds serving before the RSS is read


def env(pex_root: str, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": "/root", "PEX_ROOT": pex_root, **extra}


def version(pex: str, pex_root: str) -> float:
    start = time.perf_counter()
    subprocess.run([pex, "--version"], env=env(pex_root), check=True, capture_output=True)
    return time.perf_counter() - start


def nothing() -> float:
    start = time.perf_counter()
    subprocess.run(["python3", "-I", "-c", "pass"], env=env(""), check=True)
    return time.perf_counter() - start


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for {pid}")


def answered(sock: str, ask: Callable[[grpc.Channel], bool]) -> bool:
    if not os.path.exists(sock):
        return False
    with grpc.insecure_channel(f"unix://{sock}") as channel:
        try:
            return ask(channel)
        except grpc.RpcError:
            return False


def capabilities(channel: grpc.Channel) -> bool:
    pb_grpc.ComputeDriverStub(channel).GetCapabilities(CAPABILITIES, timeout=1)
    return True


def serving(channel: grpc.Channel) -> bool:
    answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def ctl(pex: str, pex_root: str, sock: str, *args: str) -> float:
    """Seconds one ``podmand ctl`` takes; exit 0, or 1 with the driver's NOT_FOUND for ``get``."""
    start = time.perf_counter()
    done = subprocess.run([pex, "ctl", "--socket", sock, *args], env=env(pex_root), capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0 and not (args[0] == "get" and "not found" in done.stderr.lower()):
        raise SystemExit(f"ctl {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return took


def serve(pex: str, pex_root: str, podman: str) -> tuple[float, float, float, float, float]:
    """Seconds to accepting, to SERVING, the idle RSS in MB, then seconds of ctl list and ctl get."""
    work = tempfile.mkdtemp(prefix="podmand-bench-")
    sock = f"{work}/d.sock"
    start = time.perf_counter()
    proc = subprocess.Popen(
        [pex, "serve", "--podman-socket", podman, "--socket", sock, "--state-dir", f"{work}/state"],
        env=env(pex_root),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        times = []
        for ask in (capabilities, serving):
            while not answered(sock, ask):
                if proc.poll() is not None:
                    raise SystemExit("podmand exited before serving")
                time.sleep(0.005)
            times.append(time.perf_counter() - start)
        time.sleep(IDLE)
        rss = rss_mb(proc.pid)
        listed = ctl(pex, pex_root, sock, "list")
        got = ctl(pex, pex_root, sock, "get", str(uuid.uuid4()))
        return times[0], times[1], rss, listed, got
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pex", default=str(ROOT / "dist" / "podmand.pex"))
    parser.add_argument("--podman", default="/run/podman/podman.sock")
    parser.add_argument("-n", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, ...]]] = {"cold": [], "warm": []}
    anchors: dict[str, list[float]] = {"python3 -I -c pass": [], "raw libpod calls": []}
    for _ in range(args.n):
        anchors["python3 -I -c pass"].append(nothing())
        anchors["raw libpod calls"].append(startup_calls(args.podman))
        root = tempfile.mkdtemp(prefix="pexroot-")
        for kind in ("cold", "warm"):
            runs[kind].append((version(args.pex, root),))
        shutil.rmtree(root)
        root = tempfile.mkdtemp(prefix="pexroot-")
        for kind in ("cold", "warm"):
            runs[kind][-1] += serve(args.pex, root, args.podman)
        shutil.rmtree(root)
    med = {kind: [statistics.median(col) for col in zip(*rows, strict=True)] for kind, rows in runs.items()}
    print(f"{Path(args.pex).name} ({os.path.getsize(args.pex) / 2**20:.1f} MB), {args.n} runs, median")
    for i, name in enumerate(("--version", "serve → accepting", "serve → SERVING")):
        print(f"{name:18s} cold {med['cold'][i] * 1000:7.0f} ms   warm {med['warm'][i] * 1000:7.0f} ms")
    print(f"{'idle RSS':18s} cold {med['cold'][3]:7.1f} MB   warm {med['warm'][3]:7.1f} MB")
    for i, name in ((4, "ctl list"), (5, "ctl get")):
        print(f"{name:18s} cold {med['cold'][i] * 1000:7.0f} ms   warm {med['warm'][i] * 1000:7.0f} ms")
    idle, raw = (statistics.median(v) for v in anchors.values())
    print(f"anchor: python3 -I -c pass {idle * 1000:.0f} ms (--version warm {med['warm'][0] / idle:.1f}x); "
          f"serve's libpod calls made raw {raw * 1000:.0f} ms (SERVING warm {med['warm'][2] / raw:.2f}x)")


if __name__ == "__main__":
    main()
