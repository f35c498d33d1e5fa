"""What the peer check on the driver socket costs per call (``podmand/security/peers.py``).

    python3 bench/peer_latency.py [-n 2000]

Starts ``python -m podmand serve`` against the fake libpod (tests/fakes; the
cost measured is the socket hop, not Podman's), then times the same calls on
the public socket (peer-checked, spliced) and on the internal grpc socket behind
it (what a client would see without the check), in interleaved rounds: unary
calls on one channel, and a new connection plus its first call.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from podmand._proto import compute_driver_pb2 as pb  # noqa: E402
from podmand._proto import compute_driver_pb2_grpc as pb_grpc  # noqa: E402
from podmand._proto import extension_pb2 as ext  # noqa: E402
from tests.fakes.libpod import FakeLibpod  # noqa: E402
from tests.wait import wait_until  # noqa: E402

GATEWAY = ext.PeerMetadata(
    protocol_version=ext.ProtocolVersion(major=1, minor=0), implementation_name="bench",
    implementation_version="0", supported_capabilities=["openshell.compute.contract"],
    required_capabilities=["openshell.compute.contract"],
)


def timed(n: int, call: Callable[[], object]) -> list[float]:
    for _ in range(min(20, n)):
        call()  # warm up
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def summary(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples) * 1e3, samples[int(len(samples) * 0.95) - 1] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=2000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pdb-", dir="/tmp"))
    fake = FakeLibpod().start_in_thread(str(tmp / "podman.sock"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSHELL_", "PODMAND_"))}
    env.update(OPENSHELL_COMPUTE_DRIVER_SOCKET=str(tmp / "d.sock"), PODMAND_STATE_DIR=str(tmp / "state"),
               OPENSHELL_PODMAN_SOCKET=fake.path, OPENSHELL_LOG_LEVEL="debug", PODMAND_RESYNC_INTERVAL="0")
    log = open(tmp / "log", "w+b")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "podmand", "serve"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        def ready() -> str | None:
            text = (tmp / "log").read_text()
            return text if "ready: serving" in text else None

        text = wait_until(ready, 30, "podmand to serve")
        internal = re.search(r"is spliced to (\S+)", text).group(1)  # type: ignore[union-attr]
        public = str(tmp / "d.sock")
        print(f"{args.n} calls each; public {public} -> internal {internal}")
        paths = {"peer-checked (public)": public, "direct (internal)": internal}
        channels = {label: grpc.insecure_channel(f"unix://{path}") for label, path in paths.items()}
        samples: dict[tuple[str, str], list[float]] = {}

        def connect(path: str) -> None:
            with grpc.insecure_channel(f"unix://{path}") as c:
                health_pb2_grpc.HealthStub(c).Check(health_pb2.HealthCheckRequest())

        for _ in range(10):  # interleaved rounds, so drift hits both sides alike
            for label, path in paths.items():
                stub = pb_grpc.ComputeDriverStub(channels[label])
                health = health_pb2_grpc.HealthStub(channels[label])
                calls: dict[str, Callable[[], object]] = {
                    "GetCapabilities": lambda s=stub: s.GetCapabilities(pb.GetCapabilitiesRequest(gateway=GATEWAY)),
                    "Health.Check": lambda h=health: h.Check(health_pb2.HealthCheckRequest()),
                    "connect + Check": lambda p=path: connect(p),
                }
                for name, call in calls.items():
                    n = args.n // 10 if name != "connect + Check" else max(5, args.n // 100)
                    samples.setdefault((label, name), []).extend(timed(n, call))
        for channel in channels.values():
            channel.close()
        for name in ("GetCapabilities", "Health.Check", "connect + Check"):
            line = [f"{name:16s}"]
            medians = []
            for label in paths:
                median, p95 = summary(samples[(label, name)])
                medians.append(median)
                line.append(f"{label} median {median:.3f} ms p95 {p95:.3f}")
            line.append(f"added {(medians[0] - medians[1]) * 1e3:+.0f} us")
            print(" | ".join(line))
    finally:
        proc.terminate()
        proc.wait(30)
        fake.stop_thread()
        log.close()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
