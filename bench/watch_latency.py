"""Exit → watch event latency of podmand, next to Podman's own /wait and event log.

    python3 bench/watch_latency.py --driver /path/driver.sock --podman /path/podman.sock [-n 15]

Each round creates a sandbox whose main process exits by itself after a
second, then measures, from the container's FinishedAt (Podman's record of
the exit), when (a) podmand's WatchSandboxes stream reports ContainerExited,
(b) a raw libpod ``/wait`` on the container returns, (c) the libpod event
stream delivers ``died``.  All clocks are this host's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand.libpod import PodmanClient
from podmand.libpod.times import epoch


def stats(name: str, samples: list[float]) -> str:
    s = sorted(samples)
    p95 = s[max(0, int(len(s) * 0.95) - 1)]
    return (
        f"{name:28s} median {statistics.median(s) * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  max {s[-1] * 1000:7.1f} ms"
    )


async def one_round(stub: pb_grpc.ComputeDriverStub, podman: PodmanClient) -> tuple[float, float, float]:
    sid = f"lat-{uuid.uuid4().hex[:10]}"
    arrived: dict[str, float] = {}
    running = asyncio.Event()
    exited = asyncio.Event()

    async def watch() -> None:
        async for event in stub.WatchSandboxes(pb.WatchSandboxesRequest()):
            if event.WhichOneof("payload") != "sandbox" or event.sandbox.sandbox.id != sid:
                continue
            reason = event.sandbox.sandbox.status.conditions[0].reason
            if reason == "ContainerRunning":
                running.set()
            elif reason == "ContainerExited":
                arrived["podmand"] = time.time()
                exited.set()
                return

    async def events(container_id: str) -> None:
        async with podman.events(["openshell.managed=true"]) as stream:
            async for event in stream:
                if event.Actor.id == container_id and event.Action == "died":
                    arrived["events"] = time.time()
                    return

    async def wait(container_id: str) -> None:
        await podman.wait_container(container_id)
        arrived["wait"] = time.time()

    watcher = asyncio.create_task(watch())
    box = pb.DriverSandbox(
        id=sid,
        name="lat",
        workspace="lat",
        spec=pb.DriverSandboxSpec(
            command=["sh", "-c", "sleep 1; exit 3"],
            template=pb.DriverSandboxTemplate(image="localhost/podmand-test/sandbox:1"),
        ),
    )
    await stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    await asyncio.wait_for(running.wait(), 30)
    [entry] = await podman.list_containers([f"openshell.ai/sandbox-id={sid}"])
    raw = [asyncio.create_task(events(entry.id)), asyncio.create_task(wait(entry.id))]
    await asyncio.wait_for(exited.wait(), 30)
    await asyncio.wait_for(asyncio.gather(*raw), 30)
    watcher.cancel()
    end = epoch((await podman.inspect_container(entry.id)).state.finished_at)
    assert end is not None
    await stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=sid))
    return arrived["podmand"] - end, arrived["wait"] - end, arrived["events"] - end


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--driver", required=True)
    parser.add_argument("--podman", required=True)
    parser.add_argument("-n", type=int, default=15)
    args = parser.parse_args()
    stub = pb_grpc.ComputeDriverStub(grpc.aio.insecure_channel(f"unix://{args.driver}"))
    podman = PodmanClient(args.podman)
    rounds = [await one_round(stub, podman) for _ in range(args.n)]
    print(f"{args.n} natural exits, latency after the container's FinishedAt")
    print(stats("podmand watch ContainerExited", [r[0] for r in rounds]))
    print(stats("libpod /wait returns", [r[1] for r in rounds]))
    print(stats("libpod event 'died'", [r[2] for r in rounds]))
    await podman.close()


if __name__ == "__main__":
    asyncio.run(main())
