"""GetSandbox against the raw inspects of its pair, and the RSS an extra WatchSandboxes stream costs.

N sandboxes (``sleep 3600``; each a pair, podmand/pair/, created with a real signed launch
bundle: bench/_pair.py) are created through a podmand this bench starts as the rootless
user (bench/_scale_procs.py); then GetSandbox and the raw inspects it stands for, of the
same sandbox's workload and supervisor containers on the same Podman socket (GetSandbox
reads both), interleaved (medians of --samples), and where the
time above the inspect goes (the same call past the peer gate, and GetCapabilities, which
calls no Podman, both ways); then podmand's
RSS before and after --streams new streams that each read their whole snapshot and stay
open. ``--floor`` measures grpc's own cost per open stream: a trivial server-streaming
RPC, in a process of its own, that sends N small messages and stays open. Everything
is removed at the end; processes are stopped by their recorded PID.

    flock /tmp/podmand-e2e.lock $V -m bench.get_streams -n 50 --pex /tmp/dist-X/podmand.pex
    $V -m bench.get_streams --floor -n 200
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from statistics import median as med

import grpc

from bench import _pair
from bench import _scale_raw as raw
from bench._scale_host import rss_mb
from bench._scale_procs import Podmand, gateway
from bench._scale_watch import is_ready
from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand.libpod import PodmanClient
from podmand.libpod.timeouts import Timeouts

PREFIX = f"getstreams-{uuid.uuid4().hex[:6]}-"
WORKSPACE = f"{PREFIX}w"


async def read_snapshot(call: grpc.aio.UnaryStreamCall, n: int, sids: set[str] | None = None) -> set[str]:
    """Read until ``n`` distinct sandboxes (of ``sids``, when given) were seen Ready."""
    ready: set[str] = set()
    async for event in call:
        if event.WhichOneof("payload") == "sandbox":
            b = event.sandbox.sandbox
            if (sids is None or b.id in sids) and is_ready(b):
                ready.add(b.id)
        if len(ready) >= n:
            break
    return ready


async def streams_rss(stub: pb_grpc.ComputeDriverStub, pid: int, n: int, count: int) -> tuple[float, float, float]:
    warm = stub.WatchSandboxes(pb.WatchSandboxesRequest())  # first: what every stream shares is allocated
    await asyncio.wait_for(read_snapshot(warm, n), 120)
    await asyncio.sleep(1)  # let the allocator settle (measurement only, not a wait for state)
    before = rss_mb(pid)
    calls = [stub.WatchSandboxes(pb.WatchSandboxesRequest()) for _ in range(count - 1)]  # a call starts at once
    await asyncio.wait_for(asyncio.gather(*(read_snapshot(c, n) for c in calls)), 300)
    await asyncio.sleep(1)
    after = rss_mb(pid)
    for c in [warm, *calls]:
        c.cancel()
    return before, after, (after - before) / len(calls)


async def spied(stub: pb_grpc.ComputeDriverStub, pid: int, sids: list[str], args: argparse.Namespace) -> None:
    """podmand sampled by py-spy (its stacks, idle ones included) while it answers only GetSandbox."""
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    proc = subprocess.Popen([spy, "record", "-p", str(pid), "-r", "1000", "-f", "raw", "-o", args.spy, "--idle"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await asyncio.sleep(1)  # py-spy attaching (measurement only)
        for i in range(args.spy_gets):
            await stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sids[i % len(sids)]))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    print(f"py-spy: {args.spy}", flush=True)


async def run(args: argparse.Namespace) -> None:
    podman = PodmanClient(args.podman, timeouts=Timeouts(request=300.0))
    daemon = Podmand(args.user, args.podman, pex=args.pex if not args.source else "", source=args.source)
    sids = [f"{PREFIX}{i}" for i in range(args.n)]
    channel: grpc.aio.Channel | None = None
    try:
        daemon.start()
        print(f"podmand pid {daemon.pid}; rss at start {rss_mb(daemon.pid):.1f} MB", flush=True)
        channel = grpc.aio.insecure_channel(f"unix://{daemon.socket}")
        stub = pb_grpc.ComputeDriverStub(channel)
        watch = stub.WatchSandboxes(pb.WatchSandboxesRequest())
        begin = time.perf_counter()
        for lo in range(0, args.n, 8):
            batch = sids[lo : lo + 8]
            boxes = [_pair.sandbox(s, ["sleep", "3600"], WORKSPACE) for s in batch]
            await asyncio.gather(*(stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=b)) for b in boxes))
        await asyncio.wait_for(read_snapshot(watch, args.n, set(sids)), 600)
        watch.cancel()
        print(f"built {args.n} in {time.perf_counter() - begin:.1f} s", flush=True)
        ids = await raw.workloads(podman, PREFIX)
        gets, inspects = [], []
        for i in range(args.samples + 5):
            sid = sids[i % args.n]
            g = await raw.timed(stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sid)))
            r = await raw.timed(podman.inspect_container(ids[sid]))
            r += await raw.timed(podman.inspect_container(names.supervisor_name(sid)))
            if i >= 5:  # the first few warm both paths
                gets.append(g)
                inspects.append(r)
        get, ins = med(gets) * 1000, med(inspects) * 1000
        print(f"GetSandbox at N={args.n}: {get:.2f} ms; raw inspects of the pair (workload, supervisor) {ins:.2f} ms; "
              f"ratio {get / ins:.2f}", flush=True)
        await breakdown(stub, daemon, sids, args.samples)
        if args.spy:
            await spied(stub, daemon.pid, sids, args)
        before, after, per = await streams_rss(stub, daemon.pid, args.n, args.streams + 1)
        print(
            f"RSS {before:.1f} -> {after:.1f} MB with {args.streams} more streams: {per:.3f} MB/stream",
            flush=True,
        )
        for lo in range(0, args.n, 8):
            await asyncio.gather(*(stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=s)) for s in sids[lo:lo + 8]))
    finally:
        if channel is not None:
            await channel.close()
        daemon.cleanup()
        removed = await raw.sweep(podman, PREFIX)
        print(f"clean-up: removed {removed} leftovers", flush=True)
        await podman.close()


async def breakdown(stub: pb_grpc.ComputeDriverStub, daemon: Podmand, sids: list[str], samples: int) -> None:
    """Where a GetSandbox's time above the inspect goes: the same calls straight to the
    private grpc socket behind the peer gate (root may connect; the gate's splice is
    skipped), and GetCapabilities (no Podman call: grpc's round trip from this client)
    both ways."""
    private = next(Path(daemon.socket).parent.glob(".driver.sock.*/grpc.sock"))
    async with grpc.aio.insecure_channel(f"unix://{private}") as channel:
        direct = pb_grpc.ComputeDriverStub(channel)
        rows: dict[str, list[float]] = {"GetSandbox, no gate": [], "GetCapabilities": [],
                                        "GetCapabilities, no gate": []}
        caps = pb.GetCapabilitiesRequest(gateway=gateway())
        for i in range(samples + 5):
            timed = [
                await raw.timed(direct.GetSandbox(pb.GetSandboxRequest(sandbox_id=sids[i % len(sids)]))),
                await raw.timed(stub.GetCapabilities(caps)),
                await raw.timed(direct.GetCapabilities(caps)),
            ]
            if i >= 5:
                for row, took in zip(rows.values(), timed, strict=True):
                    row.append(took)
    print("; ".join(f"{name} {med(row) * 1000:.2f} ms" for name, row in rows.items()), flush=True)


# ---------------------------------------------------------------- grpc's floor

FLOOR_METHOD = "/floor.Floor/Watch"


async def floor_server(socket: str, n: int) -> None:
    events = [
        pb.WatchSandboxesEvent(sandbox=pb.WatchSandboxesSandboxEvent(sandbox=pb.DriverSandbox(id=f"s{i}", name="x")))
        for i in range(n)
    ]

    async def watch(request: bytes, context: grpc.aio.ServicerContext) -> object:
        for event in events:
            yield event.SerializeToString()
        await asyncio.Event().wait()  # stays open

    handler = grpc.method_handlers_generic_handler(
        "floor.Floor", {"Watch": grpc.unary_stream_rpc_method_handler(watch)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def floor(args: argparse.Namespace) -> None:
    socket = f"/tmp/{PREFIX}floor.sock"
    proc = subprocess.Popen([sys.executable, "-m", "bench.get_streams", "--floor-serve", socket, "-n", str(args.n)],
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            call = channel.unary_stream(FLOOR_METHOD)

            async def read() -> grpc.aio.UnaryStreamCall:
                c = call(b"")
                got = 0
                async for _ in c:
                    got += 1
                    if got == args.n:
                        break
                return c

            warm = await read()
            await asyncio.sleep(1)
            before = rss_mb(proc.pid)
            calls = await asyncio.gather(*(read() for _ in range(args.streams)))
            await asyncio.sleep(1)
            after = rss_mb(proc.pid)
            for c in [warm, *calls]:
                c.cancel()
        print(f"grpc floor: RSS {before:.1f} -> {after:.1f} MB with {args.streams} streams of {args.n} messages: "
              f"{(after - before) / args.streams:.3f} MB/stream", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
        if os.path.exists(socket):
            os.unlink(socket)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=50)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--user", default="podmand")
    parser.add_argument("--podman", default="/run/user/1001/podman/podman.sock")
    parser.add_argument("--pex", default="")
    parser.add_argument("--source", default="")
    parser.add_argument("--spy", default="", help="py-spy (raw/collapsed) of podmand over --spy-gets GetSandbox calls")
    parser.add_argument("--spy-gets", type=int, default=400)
    parser.add_argument("--floor", action="store_true")
    parser.add_argument("--floor-serve", default="")
    args = parser.parse_args()
    if args.floor_serve:
        asyncio.run(floor_server(args.floor_serve, args.n))
    elif args.floor:
        asyncio.run(floor(args))
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
