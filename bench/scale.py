"""Cost at scale: podmand next to raw libpod with N sandboxes (issue 11's goals, one table).

    flock -o /tmp/podmand-e2e.lock python3 bench/scale.py [--pex dist/podmand.pex | --source CHECKOUT]
        [-n 500] [--user podmand] [--podman /run/user/1001/podman/podman.sock] [--idle 200] [--window 20]

Run as root, against the rootless Podman of tests/setup-podman.sh and the images of
tests/images/build.sh.  Raises the host limits N sandboxes need (sub-ids, key quota,
inotify instances) and restores them at the end, as it removes everything it made.
The header names the Podman measured (the socket's /version).  One command line per
Podman of the matrix (build ./dist first: PYTHON=$V ./build_pex.sh --all):

    Podman 4.3.1 (the host):
    flock -o /tmp/podmand-e2e.lock /var/lib/podmand-test/venv/bin/python bench/scale.py --pex dist/podmand.pex -n N
    Podman 5.4.2 (the Debian 13 tree of tests/setup-podman5.sh, its CPython 3.13 virtualenv):
    flock -o /tmp/podmand-e2e.lock bash tests/setup-podman5.sh run \
        /var/lib/podmand-test/venv/bin/python bench/scale.py --pex dist/podmand.pex -n N

Inside the tree everything is the tree's: /etc/subuid and /etc/subgid, the rootless
service tests/setup-podman.sh started there and recorded (restarted, when sub-ids are
added, with the same script, inside), the socket /run/user/UID/podman/podman.sock.  Only
the kernel's key quota and inotify limit are shared with the host; both are restored
exactly.

Every sandbox is a pair (podmand/pair/: a workload and a supervisor container and a
channel volume), on both sides: podmand's creates and starts carry a real signed launch
bundle, and a raw sandbox is the pair's skeleton (bench/_pair.py, bench/_scale_raw.py).

Phases: podmand's warm start (no sandboxes); raw (podmand stopped): build N, time
stop/start, delete N; podmand: build N (at --idle sandboxes: Podman's CPU over
--window seconds with podmand running, then stopped), time Get/Stop/Start, snapshots,
live events during snapshots, exits, then delete N.  "raw" is podmand's own libpod
client (podmand/libpod) on the same socket.  Below 10 sandboxes, as many exit rounds
as sandboxes (and live exits at most 3, at most N): the smallest run that proves the
bench works is ``-n 3 --window 2``.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import pwd
import random
import signal
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Coroutine
from pathlib import Path
from statistics import median as med
from typing import Any, TypeVar

import grpc
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _pair
from bench import _scale_raw as raw
from bench._scale_host import HostLimits, cpu_seconds, rootless_target, rss_mb, service_pids
from bench._scale_procs import Podmand
from bench._scale_report import Measured, ms, table
from bench._scale_watch import Watch, snapshot_time
from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand.libpod import PodmanClient
from podmand.libpod.models import Event
from podmand.libpod.timeouts import Timeouts
from podmand.libpod.times import epoch

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
PREFIX = f"scale-{uuid.uuid4().hex[:6]}-"  # this run's sandbox ids
TEARDOWN_RETRY = "Podman's network teardown (netavark) failed"  # podmand/driver/teardown.py's warning
WORKSPACE = f"{PREFIX}w"  # every sandbox's (a workspace makes no network: a workload has none)
SEQUENTIAL = 15  # one-at-a-time creates timed, per side
BATCH = 32
SAMPLES = 30  # Get / inspect calls
STOPS = 10  # Stop + Start pairs
EXITS = 10  # exit -> event rounds (at most N)
LIVE = 3  # exits during new streams' snapshots (at most N)
NEW_STREAMS = 4
WIDTH = 8  # deletes in flight at once, both sides


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.n: int = args.n
        self.uid = pwd.getpwnam(args.user).pw_uid
        self.notes: list[str] = []
        self.podman = PodmanClient(args.podman, timeouts=Timeouts(request=300.0))
        self.daemon = Podmand(args.user, args.podman, pex=args.pex if not args.source else "", source=args.source)
        self.stub: pb_grpc.ComputeDriverStub | None = None
        self.channel: grpc.aio.Channel | None = None
        self.sids: list[str] = []
        self.version = "unknown"

    # ------------------------------------------------------------ helpers

    def service_cpu(self) -> float:
        return cpu_seconds(service_pids(self.args.podman, self.uid))

    async def connect(self) -> pb_grpc.ComputeDriverStub:
        if self.channel is not None:
            await self.channel.close()
        self.channel = grpc.aio.insecure_channel(f"unix://{self.daemon.socket}")
        self.stub = pb_grpc.ComputeDriverStub(self.channel)
        return self.stub

    # ------------------------------------------------------------ start-up

    def startup(self) -> None:
        print("start-up (no sandboxes): one untimed start to warm the pex, then 3 timed", flush=True)
        self.daemon.start()
        runs = [self.daemon.start() for _ in range(3)]
        self.daemon.stop()
        self.startup_runs = runs

    # ------------------------------------------------------------ raw

    async def raw_phase(self, images: raw.Images) -> dict[str, float]:
        print(f"raw: building {self.n} (podmand stopped)", flush=True)
        names_ = [f"{PREFIX}raw-{i}" for i in range(self.n)]
        cpu0 = self.service_cpu()
        single = [await raw.create(self.podman, names_[i], images) for i in range(min(SEQUENTIAL, self.n))]
        rates = []
        for lo in range(len(single), self.n, BATCH):
            hi = min(lo + BATCH, self.n)
            begin = time.perf_counter()
            await asyncio.gather(*(raw.create(self.podman, names_[i], images) for i in range(lo, hi)))
            if hi - lo == BATCH:
                rates.append(BATCH / (time.perf_counter() - begin))
        cpu = (self.service_cpu() - cpu0) / self.n
        print(f"  raw batches of {BATCH} (/s): {' '.join(f'{r:.1f}' for r in rates)}", flush=True)
        picks = random.sample(names_, min(SAMPLES, self.n))
        stops, starts = [], []
        for name in picks[:STOPS]:
            stops.append(await raw.timed(raw.stop(self.podman, name)))
            starts.append(await raw.timed(raw.start(self.podman, name)))
        begin = time.perf_counter()
        await raw.bounded([raw.delete(self.podman, x) for x in names_], WIDTH)
        deleted = time.perf_counter() - begin
        return {
            "create": med(single),
            "rate": med(rates) if rates else 0.0,
            "cpu": cpu,
            "stop": med(stops),
            "start": med(starts),
            "delete": deleted,
        }

    # ------------------------------------------------------------ podmand: building

    async def create_one(self, watch: Watch, box: pb.DriverSandbox) -> float:
        """``box`` (bench/_pair.py's, its bundle signed before the clock starts) until Ready."""
        assert self.stub is not None
        begin = time.perf_counter()
        await self.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
        await watch.until(lambda: box.id in watch.ready, 120, f"{box.id} Ready")
        return time.perf_counter() - begin

    async def build(self, watch: Watch) -> tuple[list[float], list[float], float]:
        """N sandboxes: SEQUENTIAL one at a time, then batches; the idle test on the way."""
        sleep = ["sleep", "3600"]
        single, rates, cpu = [], [], 0.0
        idle_done = self.args.idle > self.n
        i = 0
        while i < self.n:
            if not idle_done and i >= self.args.idle:
                watch = await self.idle_test(watch)
                idle_done = True
            width = 1 if i < SEQUENTIAL else min(BATCH, self.n - i, (self.args.idle - i) if not idle_done else BATCH)
            ids = [f"{PREFIX}{j}" for j in range(i, i + width)]
            self.sids += ids
            boxes = [_pair.sandbox(s, sleep, WORKSPACE) for s in ids]
            cpu0 = self.service_cpu()
            begin = time.perf_counter()
            await asyncio.gather(*(self.create_one(watch, b) for b in boxes))
            took = time.perf_counter() - begin
            cpu += self.service_cpu() - cpu0
            if width == 1:
                single.append(took)
            elif width == BATCH:
                rates.append(BATCH / took)
            i += width
        if not idle_done:
            watch = await self.idle_test(watch)
        self.watch = watch
        print(f"  podmand batches of {BATCH} (/s): {' '.join(f'{r:.1f}' for r in rates)}", flush=True)
        return single, rates, cpu / self.n

    async def idle_test(self, watch: Watch) -> Watch:
        """Podman service CPU over the window with podmand running, then stopped."""
        count = len(self.sids)
        window = self.args.window
        print(f"idle: {count} sandboxes, {window:.0f} s with podmand, {window:.0f} s without", flush=True)
        pids = service_pids(self.args.podman, self.uid)
        cpu0 = cpu_seconds(pids)
        await asyncio.sleep(window)  # a fixed measuring window, not a wait for state
        running = (cpu_seconds(pids) - cpu0) / window
        await watch.close()
        self.daemon.stop()
        cpu0 = cpu_seconds(pids)
        await asyncio.sleep(window)
        stopped = (cpu_seconds(pids) - cpu0) / window
        floor = med([await self.info_and_list() for _ in range(3)])
        accepting, serving = self.daemon.start()
        self.notes.append(f"podmand restarted with {count} sandboxes: accepting {ms(accepting)}, SERVING {ms(serving)}"
                          f"; raw /info with the list alongside: {ms(floor)}")
        self.restarted = (count, serving, floor)
        stub = await self.connect()
        watch = Watch(stub).start()
        await watch.until(lambda: all(s in watch.ready for s in self.sids), 300, "the restarted podmand's snapshot")
        self.idle = (count, running, stopped)
        return watch

    async def info_and_list(self) -> float:
        """What a restart cannot serve before: Podman's ``/info`` (GetCapabilities and the
        keep-id check need it; on 4.3.1 it syncs every container) and one list, together."""
        start = time.perf_counter()
        await asyncio.gather(self.podman.info(), self.podman.list_containers(list(names.MANAGED_FILTER)))
        return time.perf_counter() - start

    # ------------------------------------------------------------ podmand: at N

    async def at_n(self) -> None:
        assert self.stub is not None
        stub, n = self.stub, len(self.sids)
        ids = await raw.workloads(self.podman, PREFIX)
        picks = random.sample(self.sids, min(SAMPLES, n))
        gets, inspects, ones = [], [], []
        for sid in picks:  # GetSandbox reads the workload and its supervisor: one inspect each
            gets.append(await raw.timed(stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sid))))
            one = await raw.timed(self.podman.inspect_container(ids[sid]))
            inspects.append(one + await raw.timed(self.podman.inspect_container(names.supervisor_name(sid))))
            ones.append(one)
        self.get = (med(gets), med(inspects))
        self.inspect = med(ones)
        stops, starts = [], []
        for sid in picks[:STOPS]:
            stops.append(await raw.timed(stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=sid))))
            await self.watch.until(lambda s=sid: s in self.watch.down, 60, f"{sid} stopped")  # type: ignore[misc]
            request = _pair.start(sid)  # a fresh bundle, made untimed
            starts.append(await raw.timed(stub.StartSandbox(request)))
            await self.watch.until(lambda s=sid: s in self.watch.ready, 60, f"{sid} Ready again")  # type: ignore[misc]
        self.stopstart = (med(stops), med(starts))
        snaps = [await snapshot_time(stub, n) for _ in range(3)]
        lists = [await raw.timed(self.podman.list_containers(names.MANAGED_FILTER)) for _ in range(3)]
        begin = time.perf_counter()
        for entry in await self.podman.list_containers(names.MANAGED_FILTER):
            await self.podman.inspect_container(entry.id)
        self.snapshot = (med(snaps), med(lists), time.perf_counter() - begin)
        self.rss_n = rss_mb(self.daemon.pid)

    async def exits(self) -> tuple[list[float], list[float]]:
        """Natural exits (bench/watch_latency.py's way): after FinishedAt, podmand's event
        vs the earliest raw observer; and live exits while new streams take snapshots."""
        assert self.stub is not None
        died: dict[str, float] = {}
        seen: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        opened = asyncio.Event()

        async def listen() -> None:
            async with self.podman.events(names.MANAGED_FILTER) as stream:
                opened.set()
                async for event in stream:
                    if isinstance(event, Event) and event.Action == "died":
                        died.setdefault(event.Actor.id, time.time())
                        seen[event.Actor.id].set()

        listener = asyncio.create_task(listen())
        await asyncio.wait_for(opened.wait(), 30)
        natural = []
        for k in range(min(EXITS, self.n)):
            sid = f"{PREFIX}exit-{k}"
            await self.create_one(self.watch, _pair.sandbox(sid, ["sh", "-c", "sleep 2; exit 3"], WORKSPACE))
            cid = (await raw.workloads(self.podman, sid))[sid]  # the workload exits with its main process
            waited = asyncio.create_task(self.wait_time(cid))
            await self.watch.until(lambda s=sid: s in self.watch.down, 60, f"{sid} exit")  # type: ignore[misc]
            wait_at = await waited
            await asyncio.wait_for(seen[cid].wait(), 30)
            end = epoch((await self.podman.inspect_container(cid)).state.finished_at) or 0.0
            natural.append((self.watch.down[sid] - end, wait_at - end, died[cid] - end))
            await self.stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=sid))
            await self.watch.until(lambda s=sid: s in self.watch.deleted, 60, f"{sid} deleted")  # type: ignore[misc]
        self.natural = natural
        live = []
        ids = await raw.workloads(self.podman, PREFIX)
        n = len(self.sids)
        for sid in random.sample(self.sids, min(LIVE, n)):  # the workload killed: the sandbox is down
            cid = ids[sid]
            first = asyncio.Event()
            streams = [asyncio.create_task(snapshot_time(self.stub, n, first=first)) for _ in range(NEW_STREAMS)]
            waited = asyncio.create_task(self.wait_time(cid))
            await asyncio.wait_for(first.wait(), 60)
            await self.podman.call("POST", f"/containers/{cid}/kill", query={"signal": "KILL"})
            await self.watch.until(lambda s=sid: s in self.watch.down, 60, f"{sid} killed")  # type: ignore[misc]
            wait_at = await waited
            try:
                await asyncio.wait_for(seen[cid].wait(), 30)
            except TimeoutError:  # seen on 5.4.2 at N = 200: the raw stream never sent this 'died'
                self.notes.append(f"live exit of {cid[:12]}: no raw 'died' event within 30 s; raw /wait only")
            busy = not all(t.done() for t in streams)
            live.append((self.watch.down[sid] - min(wait_at, died.get(cid, wait_at)), busy))
            await asyncio.gather(*streams)
        listener.cancel()
        self.live = live
        return [r[0] for r in natural], [min(r[1], r[2]) for r in natural]

    async def wait_time(self, cid: str) -> float:
        await self.podman.wait_container(cid)
        return time.time()

    async def delete_all(self) -> float:
        """Every sandbox deleted (8 RPCs in flight) until the watch has all the deleted events.
        A delete answered UNAVAILABLE is retried, and counted: Podman did not answer in time,
        or Podman 5.4.2's netavark failed the container's network teardown on parallel removals
        ("failed to get bridge interface") on each of podmand's own attempts
        (podmand/driver/teardown.py; it answered INTERNAL before). Anything else fails the run."""
        assert self.stub is not None
        stub, failed = self.stub, []

        def retried(exc: grpc.aio.AioRpcError) -> bool:
            return bool(exc.code() == grpc.StatusCode.UNAVAILABLE)

        async def delete(sid: str) -> None:
            for _ in range(5):
                try:
                    await stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=sid))
                    return
                except grpc.aio.AioRpcError as exc:
                    if not retried(exc):
                        raise
                    failed.append(f"{exc.code().name}: {exc.details() or ''}")
            raise SystemExit(f"DeleteSandbox {sid} failed 5 times: {failed[-1]}")

        begin = time.perf_counter()
        await raw.bounded([delete(s) for s in self.sids], WIDTH)
        await self.watch.until(lambda: all(s in self.watch.deleted for s in self.sids), 600, "every deleted event")
        took = time.perf_counter() - begin
        if failed:
            self.notes.append(f"DeleteSandbox failed {len(failed)} times (retried): {failed[0]}")
        asked = [line for line in self.daemon.log.read_text(errors="replace").splitlines() if TEARDOWN_RETRY in line]
        if asked:
            self.notes.append(f"podmand asked Podman again {len(asked)} times after a netavark teardown error: "
                              f"{asked[0]}")
        return took

    async def podmand_phase(self) -> dict[str, float]:
        print(f"podmand: building {self.n}", flush=True)
        self.daemon.start()
        self.rss_0 = rss_mb(self.daemon.pid)
        stub = await self.connect()
        single, rates, cpu = await self.build(Watch(stub).start())
        print(f"podmand: at {len(self.sids)}", flush=True)
        await self.at_n()
        print("podmand: exits", flush=True)
        await self.exits()
        print("podmand: deleting all", flush=True)
        deleted = await self.delete_all()
        await self.watch.close()
        return {"create": med(single), "rate": med(rates) if rates else 0.0, "cpu": cpu, "delete": deleted}

    async def podman_version(self) -> str:
        """The version the socket's service reports (libpod's /version), for the header."""
        data = msgspec.json.decode((await self.podman.call("GET", "/version")).body)
        version = data.get("Version") if isinstance(data, dict) else None
        return str(version or "unknown")

    async def run(self) -> Measured:
        self.version = await self.podman_version()
        print(f"Podman {self.version} on {self.args.podman}", flush=True)
        self.startup()
        r = await self.raw_phase(await raw.Images.of(self.podman))
        p = await self.podmand_phase()
        return Measured(
            n=self.n,
            create=(p["create"], r["create"]),
            rate=(p["rate"], r["rate"]),
            cpu=(p["cpu"], r["cpu"]),
            get=self.get,
            stop=(self.stopstart[0], r["stop"]),
            start=(self.stopstart[1], r["start"]),
            delete=(p["delete"], r["delete"]),
            snapshot=self.snapshot,
            live=[x for x, _ in self.live],
            idle=self.idle,
            exits=([x[0] for x in self.natural], [x[1] for x in self.natural], [x[2] for x in self.natural]),
            started=(med([a for a, _ in self.startup_runs]), med([b for _, b in self.startup_runs])),
            rss=(self.rss_0, self.rss_n),
            restarted=self.restarted,
            inspect=self.inspect,
        )

    async def sweep(self) -> None:
        removed = await raw.sweep(self.podman, PREFIX)
        print(f"clean-up: removed {removed} leftover containers and volumes", flush=True)
        await self.podman.close()


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


async def measure(bench: Bench) -> Measured:
    return await measure_with(bench, bench.run())


async def measure_with(bench: Bench, work: Coroutine[Any, Any, T]) -> T:
    """``work``'s result; whatever it leaves, podmand stopped first, is swept."""
    try:
        return await work
    finally:
        if bench.channel is not None:
            await bench.channel.close()
        bench.daemon.stop()  # before the sweep: podmand must not react to it
        await bench.sweep()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pex", default=str(ROOT / "dist" / "podmand.pex"))
    parser.add_argument("--source", default="", help="a checkout to run as `python -m podmand` instead of a pex")
    parser.add_argument("-n", type=int, default=500)
    parser.add_argument("--user", default=os.environ.get("PODMAND_TEST_USER", "podmand"))
    parser.add_argument("--podman", default="")
    parser.add_argument("--idle", type=int, default=200, help="sandboxes for the idle CPU figure")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of each idle CPU window")
    args = parser.parse_args()
    uid = rootless_target(args, "host limits, the rootless user's podmand")
    args.idle = min(args.idle, args.n)
    limits = HostLimits(args.user, uid, args.podman)
    atexit.register(limits.restore)
    signal.signal(signal.SIGTERM, interrupt)
    began = time.perf_counter()
    bench: Bench | None = None
    try:
        limits.apply(args.n)
        bench = Bench(args)
        result = asyncio.run(measure(bench))
    finally:
        if bench is not None:
            bench.daemon.cleanup()
        limits.restore()
    total = time.perf_counter() - began
    print()
    print(
        f"{args.n} sandboxes, {'source ' + args.source if args.source else Path(args.pex).name}, "
        f"Podman {bench.version}, service pid found by its socket {args.podman}; whole run {total:.0f} s"
    )
    for note in [*limits.notes, *bench.notes, *details(bench)]:
        print(f"- {note}")
    print()
    print(table(result))


def details(bench: Bench) -> list[str]:
    natural = bench.natural
    return [
        f"exit after FinishedAt, medians of {len(natural)}: podmand {ms(med([x[0] for x in natural]))}, "
        f"raw /wait {ms(med([x[1] for x in natural]))}, raw event 'died' {ms(med([x[2] for x in natural]))}",
        "live exits: " + ", ".join(f"{ms(d)}{'' if busy else ' (snapshots over by then)'}" for d, busy in bench.live),
        "warm starts (accepting, SERVING): " + ", ".join(f"{ms(a)}/{ms(b)}" for a, b in bench.startup_runs),
    ]


if __name__ == "__main__":
    main()
