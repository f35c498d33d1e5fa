"""Exit → watch event latency of podmand, next to Podman's own /wait and event log.

    # a podmand serving on --driver as the rootless user, test images of tests/images/build.sh, with
    #   OPENSHELL_SANDBOX_RUNTIME_IMAGE=localhost/podmand-test/runtime:1
    #   OPENSHELL_SUPERVISOR_IMAGE=localhost/podmand-test/supervisor2:1
    python3 bench/watch_latency.py --driver /path/driver.sock --podman /path/podman.sock [-n 15]

Each round creates a sandbox (a pair: podmand/pair/; sandbox:1 with a real Ed25519-signed
launch bundle from tests/standin/launch.py) whose main process exits by itself after a
second. The runtime stand-in reports that exit to the supervisor stand-in, which ends the
boundary; the runtime then exits with the main process's code, and the workload container
with it. From the workload's FinishedAt (Podman's record of that exit) the bench measures
when (a) podmand's WatchSandboxes stream first says the sandbox is no longer Ready (its
reason is counted: ``ContainerExited``, or ``SupervisorExited`` when podmand saw the
supervisor, which exits at the same moment, go first), (b) a raw libpod ``/wait`` on the
workload returns, (c) the libpod event stream delivers the workload's ``died``. All
clocks are this host's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand.libpod import PodmanClient
from podmand.libpod.times import epoch
from tests.standin.launch import Launch


def stats(name: str, samples: list[float]) -> str:
    s = sorted(samples)
    p95 = s[max(0, int(len(s) * 0.95) - 1)]
    return (
        f"{name:28s} median {statistics.median(s) * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  max {s[-1] * 1000:7.1f} ms"
    )


async def one_round(stub: pb_grpc.ComputeDriverStub, podman: PodmanClient,
                    reasons: Counter[str]) -> tuple[float, float, float]:
    sid = f"lat-{uuid.uuid4().hex[:10]}"
    arrived: dict[str, float] = {}
    running = asyncio.Event()
    exited = asyncio.Event()

    async def watch() -> None:
        async for event in stub.WatchSandboxes(pb.WatchSandboxesRequest()):
            if event.WhichOneof("payload") != "sandbox" or event.sandbox.sandbox.id != sid:
                continue
            ready = next((c for c in event.sandbox.sandbox.status.conditions if c.type == "Ready"), None)
            if ready is None:
                continue
            if ready.status == "True":
                running.set()
            elif running.is_set():
                arrived["podmand"] = time.time()
                reasons[ready.reason] += 1
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
            launch_authentication=Launch(sandbox_id=sid).bundle(),
        ),
    )
    await stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
    await asyncio.wait_for(running.wait(), 30)
    [entry] = await podman.list_containers([f"{names.SANDBOX_ID}={sid}",
                                            f"{names.ISOLATION_ROLE}={names.ROLE_WORKLOAD}"])
    raw = [asyncio.create_task(events(entry.id)), asyncio.create_task(wait(entry.id))]
    await asyncio.wait_for(exited.wait(), 30)
    await asyncio.wait_for(asyncio.gather(*raw), 30)
    watcher.cancel()
    end = epoch((await podman.inspect_container(entry.id)).state.finished_at)
    assert end is not None
    await stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=sid))
    return arrived["podmand"] - end, arrived["wait"] - end, arrived["events"] - end


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--driver", required=True)
    parser.add_argument("--podman", required=True)
    parser.add_argument("-n", type=int, default=15)
    args = parser.parse_args()
    stub = pb_grpc.ComputeDriverStub(grpc.aio.insecure_channel(f"unix://{args.driver}"))
    podman = PodmanClient(args.podman)
    reasons: Counter[str] = Counter()
    rounds = [await one_round(stub, podman, reasons) for _ in range(args.n)]
    print(f"{args.n} natural exits, latency after the workload container's FinishedAt")
    print(stats("podmand watch: not Ready", [r[0] for r in rounds]) + f"  reasons {dict(reasons)}")
    print(stats("libpod /wait returns", [r[1] for r in rounds]))
    print(stats("libpod event 'died'", [r[2] for r in rounds]))
    await podman.close()


if __name__ == "__main__":
    asyncio.run(main())
