"""Podman service CPU per created sandbox: podmand next to raw, and the libpod calls a
create makes, by route (issue 23, item 5).

    flock -o /tmp/podmand-e2e.lock python3 bench/create_cpu.py [--pex dist/podmand.pex | --source CHECKOUT]
        [-n 40] [--user podmand] [--podman /run/user/1001/podman/podman.sock]

Run as root, against the rootless Podman of tests/setup-podman.sh and the images of
tests/images/build.sh.  podmand (bench/_scale_procs.py: the rootless user, state under
/tmp, stopped by its PID) talks to Podman through a counting proxy this script serves
on a socket of its own: every request's route (routes.template) is counted, nothing
else of it kept.  Phases, one after the other:

- raw: N sequential raw sandboxes (bench/_scale_raw.py: the pair's skeleton of
  bench/_pair.py, two volumes, two containers, two starts);
- raw with one more event subscription open (podmand's container filter, then its
  image filter), to price what serving a subscriber costs per sandbox;
- unit costs: the service CPU of one container inspect, image inspect, volume inspect,
  and of one archive upload (a one-file tar into the raw workload's channel volume, the
  pair stopped first: podmand uploads its three into containers not running), the call
  a podmand pair makes and the raw skeleton does not;
- podmand: 2 creates to warm it (images pinned, the runtime binary extracted), then N
  one at a time (CreateSandbox of a pair, with its launch bundle, until the watch says
  Ready, then until the proxy has been quiet for 0.5 s so the looks after the start are
  counted).

Service CPU is bench/_scale_host.py's (every process of the service, and the children
it reaped).  Everything made is removed at the end (bench/_scale_raw.py's sweep).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import pwd
import re
import sys
import tarfile
import time
import uuid
from collections import Counter
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _pair
from bench import _scale_raw as raw
from bench._scale_host import cpu_seconds, rootless_target, service_pids
from bench._scale_procs import Podmand
from bench._scale_watch import Watch
from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand.libpod import PodmanClient
from podmand.libpod.routes import template
from podmand.libpod.timeouts import Timeouts

PREFIX = f"ccpu-{uuid.uuid4().hex[:6]}-"
REQUEST = re.compile(rb"(GET|POST|PUT|DELETE|HEAD) (/\S*) HTTP/1\.[01]\r\n")
UNIT = 40  # repetitions of each call priced alone
ARCHIVES = 10  # ... of the archive upload, a costlier call


class Proxy:
    """A unix socket forwarding to Podman's, counting each request by method and route."""

    def __init__(self, upstream: str, path: str) -> None:
        self.upstream = upstream
        self.path = path
        self.routes: Counter[str] = Counter()
        self.last = time.monotonic()
        self.server: asyncio.AbstractServer | None = None

    async def start(self, uid: int, gid: int) -> None:
        self.server = await asyncio.start_unix_server(self._serve, self.path)
        os.chown(self.path, uid, gid)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_unix_connection(self.upstream)

        async def up() -> None:
            tail = b""
            while data := await reader.read(65536):
                up_w.write(data)
                buf = tail + data
                for m in REQUEST.finditer(buf):
                    if m.end() > len(tail):  # not counted in the previous chunk
                        self.routes[f"{m[1].decode()} {template(m[1].decode(), m[2].decode())}"] += 1
                        self.last = time.monotonic()
                tail = buf[-2048:]
                await up_w.drain()
            up_w.write_eof()

        async def down() -> None:
            while data := await up_r.read(65536):
                writer.write(data)
                self.last = time.monotonic()
                await writer.drain()
            writer.close()

        with contextlib.suppress(OSError, ConnectionError):
            await asyncio.gather(up(), down())
        for w in (writer, up_w):
            w.close()

    async def quiet(self, seconds: float, timeout: float) -> None:
        """Until no request or answer has passed for ``seconds`` (a deadline: ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() - self.last < seconds and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


def one_file_tar() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        data = b"x" * 64
        info = tarfile.TarInfo("probe")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.n: int = args.n
        pw = pwd.getpwnam(args.user)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.podman = PodmanClient(args.podman, timeouts=Timeouts(request=300.0))
        self.daemon = Podmand(args.user, args.podman, pex=args.pex if not args.source else "", source=args.source)
        self.proxy = Proxy(args.podman, str(self.daemon.work / "podman-proxy.sock"))
        self.daemon.podman_socket = self.proxy.path
        self.workspace = f"{PREFIX}w"
        self.count = 0

    def cpu(self) -> float:
        return cpu_seconds(service_pids(self.args.podman, self.uid))

    async def raw_creates(self, images: raw.Images, n: int) -> float:
        """Service CPU per raw sandbox over ``n`` sequential creates (removed afterwards, uncounted)."""
        made = [f"{PREFIX}raw-{self.count + i}" for i in range(n)]
        self.count += n
        cpu0 = self.cpu()
        for name in made:
            await raw.create(self.podman, name, images)
        cpu = (self.cpu() - cpu0) / n
        await raw.bounded([raw.delete(self.podman, x) for x in made], 4)
        return cpu

    async def raw_with(self, images: raw.Images, subscribe: object) -> float:
        async with subscribe as events:  # type: ignore[attr-defined]
            drain = asyncio.create_task(self._drain(events))
            try:
                return await self.raw_creates(images, self.n)
            finally:
                drain.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await drain

    @staticmethod
    async def _drain(events: object) -> None:
        async for _ in events:  # type: ignore[attr-defined]
            pass

    async def unit(self, images: raw.Images) -> dict[str, float]:
        name = f"{PREFIX}unit"
        await raw.create(self.podman, name, images)
        out = {}
        calls = {
            "GET /libpod/containers/{name}/json": lambda: self.podman.inspect_container(name),
            "GET /libpod/images/{name}/json": lambda: self.podman.inspect_image(_pair.SANDBOX_IMAGE),
            "GET /libpod/volumes/{name}/json": lambda: self.podman.inspect_volume(_pair.volumes(name)[0]),
        }
        for route, call in calls.items():
            cpu0 = self.cpu()
            for _ in range(UNIT):
                await call()
            out[route] = (self.cpu() - cpu0) / UNIT
        await raw.stop(self.podman, name)
        cpu0 = self.cpu()
        for _ in range(ARCHIVES):
            await self.podman.put_archive(name, names.CHANNEL_DIR, one_file_tar())
        out["PUT /libpod/containers/{name}/archive"] = (self.cpu() - cpu0) / ARCHIVES
        await raw.delete(self.podman, name)
        return out

    async def podmand_creates(self) -> tuple[float, Counter[str]]:
        await self.proxy.start(self.uid, self.gid)
        await asyncio.to_thread(self.daemon.start)  # blocking: the proxy serves meanwhile
        channel = grpc.aio.insecure_channel(f"unix://{self.daemon.socket}")
        try:
            stub = pb_grpc.ComputeDriverStub(channel)
            watch = Watch(stub).start()

            async def one(sid: str) -> None:
                box = _pair.sandbox(sid, ["sleep", "3600"], self.workspace)
                await stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
                await watch.until(lambda: sid in watch.ready, 120, f"{sid} Ready")
                await self.proxy.quiet(0.5, 10)

            for i in range(2):
                await one(f"{PREFIX}warm{i}")
            before = Counter(self.proxy.routes)
            cpu0 = self.cpu()
            for i in range(self.n):
                await one(f"{PREFIX}{i}")
            cpu = (self.cpu() - cpu0) / self.n
            routes = self.proxy.routes - before
            await watch.close()
        finally:
            await channel.close()
            await asyncio.to_thread(self.daemon.stop)
        return cpu, routes

    async def run(self) -> None:
        images = await raw.Images.of(self.podman)
        await self.raw_creates(images, 2)  # warm
        r0 = await self.raw_creates(images, self.n)
        sub_c = await self.raw_with(images, self.podman.events([f"{names.OWNER}={names.OWNER_VALUE}"]))
        sub_i = await self.raw_with(images, self.podman.image_events())
        r1 = await self.raw_creates(images, self.n)
        units = await self.unit(images)
        p, routes = await self.podmand_creates()
        r = (r0 + r1) / 2
        ms = 1000.0
        print(f"\nN = {self.n}, Podman service CPU per sandbox (ms):")
        print(f"  raw pair (2 volumes, 2 creates, 2 starts): {r0 * ms:.1f}, again {r1 * ms:.1f}")
        print(f"  raw + a container-event subscriber (podmand's filter): {sub_c * ms:.1f} (+{(sub_c - r) * ms:.1f})")
        print(f"  raw + an image-event subscriber: {sub_i * ms:.1f} (+{(sub_i - r) * ms:.1f})")
        print(f"  podmand: {p * ms:.1f}  ratio {p / r:.2f}x  (+{(p - r) * ms:.1f})")
        print(f"unit costs (ms of service CPU per call, mean of {UNIT}; the archive's of {ARCHIVES}):")
        for route, c in units.items():
            print(f"  {route}: {c * ms:.2f}")
        print(f"libpod calls per create through podmand (over {self.n}):")
        for route, c in sorted(routes.items(), key=lambda kv: -kv[1]):
            print(f"  {c / self.n:5.2f}  {route}")

    async def sweep(self) -> None:
        removed = await raw.sweep(self.podman, PREFIX)
        print(f"clean-up: removed {removed} containers and volumes", flush=True)
        await self.podman.close()


async def measure(bench: Bench) -> None:
    try:
        await bench.run()
    finally:
        bench.daemon.stop()
        await bench.sweep()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pex", default=str(Path(__file__).resolve().parents[1] / "dist" / "podmand.pex"))
    parser.add_argument("--source", default="", help="a checkout to run as `python -m podmand` instead of a pex")
    parser.add_argument("-n", type=int, default=40)
    parser.add_argument("--user", default=os.environ.get("PODMAND_TEST_USER", "podmand"))
    parser.add_argument("--podman", default="")
    args = parser.parse_args()
    rootless_target(args, "the rootless user's podmand")
    bench = Bench(args)
    try:
        asyncio.run(measure(bench))
    finally:
        bench.daemon.cleanup()


if __name__ == "__main__":
    main()
