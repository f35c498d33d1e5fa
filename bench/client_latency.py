"""Per-call latency of podmand's libpod client against podman-py, on one socket.

    python3 bench/client_latency.py [--socket PATH] [-n 200]

Prints the median and p95 per call for podmand's asyncio client and for
podman-py run in a thread (how an asyncio server would have to use it), plus
the import cost of each.  Podman must be running; nothing is created.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from podmand.libpod import PodmanClient


def summary(samples: list[float]) -> str:
    samples = sorted(samples)
    p95 = samples[int(len(samples) * 0.95) - 1]
    return f"median {statistics.median(samples) * 1000:6.3f} ms  p95 {p95 * 1000:6.3f} ms"


async def timed(n: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    await call()  # warm up: connection, caches
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        out.append(time.perf_counter() - start)
    return out


def import_ms(module: str) -> float:
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=Path(__file__).parents[1])
        runs.append(time.perf_counter() - start)
    base = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import asyncio"], check=True)
        base.append(time.perf_counter() - start)
    return (statistics.median(runs) - statistics.median(base)) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", default=os.environ.get("PODMAN_ROOTLESS_SOCK", "/run/podman/podman.sock"))
    parser.add_argument("-n", type=int, default=200)
    args = parser.parse_args()

    import podman  # the comparison; imported here so its cost is not in our numbers

    ours = PodmanClient(args.socket)
    theirs = podman.PodmanClient(base_url=f"unix://{args.socket}")
    label = ["openshell.managed=true"]
    cases: list[tuple[str, Callable[[], Awaitable[object]], Callable[[], Awaitable[object]]]] = [
        ("_ping", ours.ping, lambda: asyncio.to_thread(theirs.ping)),
        (
            "containers/json",
            lambda: ours.list_containers(label),
            lambda: asyncio.to_thread(theirs.containers.list, all=True, filters={"label": label[0]}),
        ),
        (
            "volumes/json",
            lambda: ours.list_volumes(label),
            lambda: asyncio.to_thread(theirs.volumes.list, filters={"label": label[0]}),
        ),
    ]
    print(f"socket {args.socket}, {args.n} calls each")
    for name, mine, other in cases:
        a, b = await timed(args.n, mine), await timed(args.n, other)
        ratio = statistics.median(b) / statistics.median(a)
        print(f"{name:16s} podmand {summary(a)} | podman-py+thread {summary(b)} | x{ratio:.1f}")
    print(f"import podmand.libpod {import_ms('podmand.libpod'):6.1f} ms | import podman {import_ms('podman'):6.1f} ms")
    await ours.close()
    theirs.close()


if __name__ == "__main__":
    asyncio.run(main())
