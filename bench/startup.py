"""Cold and warm start of the pex: ``--version`` and time until ``serve`` answers health.

    python3 bench/startup.py [--pex dist/podmand.pex] [--podman /run/podman/podman.sock] [-n 5]

Cold: an empty PEX_ROOT (the pex unpacks its venv first). Warm: the same PEX_ROOT
again.  Time-to-serving runs ``serve`` against a live Podman and polls the gRPC
health service until it says SERVING; the process is then stopped with SIGTERM.
Runs under the system CPython with an empty environment, as an operator would.
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
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]


def env(pex_root: str, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": "/root", "PEX_ROOT": pex_root, **extra}


def version(pex: str, pex_root: str) -> float:
    start = time.perf_counter()
    subprocess.run([pex, "--version"], env=env(pex_root), check=True, capture_output=True)
    return time.perf_counter() - start


def serving(pex: str, pex_root: str, podman: str) -> float:
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
        while True:
            if proc.poll() is not None:
                raise SystemExit("podmand exited before serving")
            if os.path.exists(sock):
                with grpc.insecure_channel(f"unix://{sock}") as channel:
                    try:
                        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
                        if answer.status == health_pb2.HealthCheckResponse.SERVING:
                            return time.perf_counter() - start
                    except grpc.RpcError:
                        pass
            time.sleep(0.005)
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
    rows = []
    for name, measure in (
        ("--version", lambda r: version(args.pex, r)),
        ("serve → SERVING", lambda r: serving(args.pex, r, args.podman)),
    ):
        cold, warm = [], []
        for _ in range(args.n):
            root = tempfile.mkdtemp(prefix="pexroot-")
            cold.append(measure(root))
            warm.append(measure(root))
            shutil.rmtree(root)
        rows.append((name, statistics.median(cold), statistics.median(warm)))
    print(f"{Path(args.pex).name}, {args.n} runs, CPython {sys.version.split()[0]} driving /usr/bin/python3 pex")
    for name, cold, warm in rows:
        print(f"{name:18s} cold {cold * 1000:7.0f} ms   warm {warm * 1000:7.0f} ms")


if __name__ == "__main__":
    main()
