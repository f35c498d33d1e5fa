"""Sandbox create → Ready (a workload and a supervisor container per sandbox,
podmand/pair/), through podmand and as the same libpod calls made raw; and podmand's
memory per sandbox (issue 31, item 9).

    eval "$(bash tests/setup-podman.sh env)"      # PODMAN_ROOTLESS_SOCK; run as root
    python3 bench/pair_lifecycle.py [--pex dist/podmand.pex] [-n 8] [-m 24] [--calls 3]

Why: a pair is two containers, three archives and a fresh TLS authority per sandbox; the
question is what podmand adds on top of those calls (issue 31's aim: at most 1.10× them)
and what each sandbox costs podmand's memory. The single-container layout this was once
compared with is gone; docs/benchmarks.md keeps those figures as history.

One phase, with a podmand of its own (the pex as the rootless user, state under /tmp):
two warm-up sandboxes each way; M podmand creates back to back between two RSS readings;
then N turns of one raw create and one podmand create, the raw one first on even turns
and second on odd ones, so both see the same host (the test host's two cores are
shared): the ratio is of these. Every sandbox is kept until the phase ends.

- **raw split**: ``pair/lifecycle.create``'s calls, written out here in its order with
  podmand's own libpod client on the rootless socket (its keep-alive pool and encoder,
  so the comparison is of what podmand does around the calls, not of two HTTP clients):
  the workspace volume (the driver makes it before the pair), the channel volume, the
  workload created stopped, its inspect, the channel and workspace archives, the
  supervisor, its archive, the workload's start, the supervisor's start. Ready = both
  starts returned (libpod answers a start once the container runs; each is checked to
  read ``running`` afterwards). The bytes are podmand's pure functions' (``pair.specs``,
  ``pair.documents``, ``pair.tls``, ``pair.archives``) from a plan of the same request,
  with a real Ed25519-signed launch bundle (tests/standin/launch.py); the fence, TLS mint,
  documents and archives between the inspect and the uploads are timed too (a raw client
  must make them), and reported apart.
- **podmand split**: podmand with the stand-in images of
  tests/images, ``CreateSandbox`` with a fresh bundle until a watch stream opened before
  says ``Ready=True`` (its reason is counted: ``ContainerRunning`` when nothing else ran).
- **calls** (``--calls K``): a split podmand behind a counting proxy (create_cpu.py's),
  the libpod calls per create by route, until the proxy was quiet for 0.5 s, and when
  each request of the last create was sent.

Before the phases every userns=auto range the run will use is primed (:func:`prime`).
Memory: podmand's RSS (and its anonymous part) from /proc after the warm-up and a settle,
then after the M back-to-back sandboxes and a settle: (after − before) / M; and, as RSS
grows in pages and in uneven steps, the median of what each of the M creates added (read
right after its Ready). podmand resyncs every 600 s instead of 30 s (``QUIET``), so
no resync falls between the readings.

Every object is named after this run's id (raw ones also carry a label of their own, not
podmand's owner label) and removed at the end, by name and then by that label and this
run's sandbox ids. A podmand sandbox that vanishes
(an e2e session start on the same Podman removes every ``io.podmand.owner=podmand``
object) is retried under a new id, and the run is marked disturbed; so it is when other
podmand sandboxes exist at a phase's start or a pytest process runs meanwhile: rerun it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _pair
from bench._scale_host import rootless_target
from bench._scale_procs import Podmand
from bench.create_cpu import Proxy
from podmand import names
from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc
from podmand.config import Settings, loading
from podmand.libpod import PodmanClient, PodmanError
from podmand.pair import archives, documents, outerfence, specs, tls
from podmand.sandbox import spec as sandbox_spec
from podmand.sandbox.identity import Resolved
from podmand.sandbox.plan import Plan, Provision
from podmand.sandbox.usernamespace import AUTO_USERNS_SIZE
from tests.standin.launch import Launch

RUNTIME_IMAGE = "localhost/podmand-test/runtime:1"
SUPERVISOR2_IMAGE = "localhost/podmand-test/supervisor2:1"
WORKLOAD_IMAGE = "localhost/podmand-test/workload:1"
RUNTIME_PATH = "/openshell-sandbox"  # in runtime:1
IDENTITY = 1000  # workload:1's USER sandbox
COMMAND = _pair.COMMAND  # a shell that exits on SIGTERM
RUN = uuid.uuid4().hex[:6]
WORKSPACE = f"bench{RUN}"  # this run's own
RAW_LABEL = "io.podmand.bench"  # the raw objects' own label: not podmand's owner, which e2e wipes
RAW_VALUE = f"pair-{RUN}"
# No periodic resync inside a phase (the default is every 30 s): its list of every sandbox
# raises the RSS high-water once (+80 kB at 10 pairs here), and whether it fell between the
# two RSS readings would decide the figure. Create → Ready does not depend on it.
QUIET = {"PODMAND_RESYNC_INTERVAL": "600"}
SPLIT = {
    **QUIET,
    "OPENSHELL_SANDBOX_RUNTIME_IMAGE": RUNTIME_IMAGE,
    "OPENSHELL_SUPERVISOR_IMAGE": SUPERVISOR2_IMAGE,
    "OPENSHELL_SANDBOX_IMAGE": WORKLOAD_IMAGE,
}
READY_TIMEOUT = 120.0
PREFIXES = ("bpr", "bps", "bpc", "bpp")  # sandbox ids and names: raw split, podmand split, ...
ATTEMPTS = 3  # per sandbox slot, when sandboxes vanish under the bench
SETTLE = 3.0  # seconds of quiet before an RSS reading
PRIME_SPARE = 8  # userns ranges primed beyond a phase's own sandboxes (others' containers may hold some)
WARM = 2  # sandboxes made before the timed ones (images pinned, binaries extracted, imports done)


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:7.1f} ms (max {max(samples) * 1000:.1f})"


def request(sandbox_id: str, image: str, bundle: bytes = b"") -> pb.DriverSandbox:
    return pb.DriverSandbox(
        id=sandbox_id, name="b", workspace=WORKSPACE,
        spec=pb.DriverSandboxSpec(command=COMMAND, template=pb.DriverSandboxTemplate(image=image),
                                  launch_authentication=bundle),
    )


def bundle_for(sandbox_id: str) -> bytes:
    return Launch(uid=IDENTITY, gid=IDENTITY, sandbox_id=sandbox_id).bundle()


# ---------------------------------------------------------------- raw: the split's calls


@dataclass
class RawPair:
    """One raw sandbox's pair: what lifecycle.create is given, built by podmand's pure functions."""

    plan: Plan
    prov: Provision
    workload: dict[str, Any]
    supervisor: dict[str, Any]
    bundle: Any  # tokens.LaunchAuthentication

    @property
    def names(self) -> tuple[list[str], list[str]]:
        containers = [self.supervisor["name"], self.workload["name"]]
        return containers, [names.channel_volume_name(self.plan.sandbox_id), self.plan.volume_name]


@dataclass
class Raw:
    podman: PodmanClient
    settings: Any
    runtime_bin: str
    workload_image: Any
    supervisor_image_id: str
    made: list[RawPair] = field(default_factory=list)

    def pair(self, sandbox_id: str) -> RawPair:
        raw = bundle_for(sandbox_id)
        plan = sandbox_spec.validate(request(sandbox_id, WORKLOAD_IMAGE, raw), self.settings)
        image = self.workload_image
        prov = Provision(
            image_id=image.id, image_user=image.config.user, image_env=tuple(image.config.env or ()), network="",
            supervisor_path=self.runtime_bin, secrets_dir="/nonexistent", instance=uuid.uuid4().hex[:12],
            # as podmand resolves workload:1's USER (its /etc/group lists it in its own group)
            identity=Resolved(uid=IDENTITY, gid=IDENTITY, supplementary=(IDENTITY,), source="image", digest=image.id),
        )
        workload = specs.workload_spec(plan, self.settings, prov, rootless=True)
        supervisor = specs.supervisor_spec(plan, self.settings, prov, supervisor_image_id=self.supervisor_image_id)
        for built in (workload, supervisor):
            built["labels"] = {**built["labels"], names.OWNER: RAW_VALUE, RAW_LABEL: RAW_VALUE}
        bundle = sandbox_spec.launch_bundle(raw, sandbox_id, "launch_authentication")
        return RawPair(plan, prov, workload, supervisor, bundle)

    async def create(self, p: RawPair) -> tuple[float, float, dict[str, float]]:
        """lifecycle.create's calls in its order: (seconds to both started, seconds of them
        minting, seconds per step)."""
        podman, plan, labels = self.podman, p.plan, {RAW_LABEL: RAW_VALUE, names.OWNER: RAW_VALUE}
        wname, sname = p.workload["name"], p.supervisor["name"]
        identity = documents.identity_of(p.prov.identity)
        self.made.append(p)
        steps: dict[str, float] = {}
        mark = begin = time.perf_counter()

        def step(what: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            steps[what] = now - mark
            mark = now

        await podman.create_volume(plan.volume_name, labels)
        step("workspace volume")
        await podman.create_volume(names.channel_volume_name(plan.sandbox_id), labels)
        step("channel volume")
        await podman.create_container(p.workload)
        step("create workload")
        inspect = await podman.inspect_container(wname)
        step("inspect workload")
        fence = outerfence.outer_fence(p.bundle.supervisor.runtime_generation, inspect)
        docs = documents.documents(documents.Launch(
            sandbox_id=plan.sandbox_id, container_id=inspect.id, generation=str(uuid.uuid4()),
            host_gateway_ip="127.0.0.1", identity=identity,
            claims=documents.resource_claims(inspect.id, identity, plan.userns),
            child_env=documents.child_env(p.prov.image_env, plan.user_env), bundle=p.bundle, fence=fence,
            tls=tls.mint(p.bundle.supervisor.session_id)))
        channel, workspace = archives.channel(docs, identity), archives.workspace(identity)
        supervisor = archives.supervisor(docs, identity)
        step("mint (fence, TLS, documents, archives)")
        await podman.put_archive(wname, names.CHANNEL_DIR, channel)
        step("channel archive")
        await podman.put_archive(wname, p.prov.workspace, workspace)
        step("workspace archive")
        await podman.create_container(p.supervisor)
        step("create supervisor")
        await podman.put_archive(sname, "/", supervisor)
        step("supervisor archive")
        await podman.start_container(wname)
        step("start workload")
        await podman.start_container(sname)
        step("start supervisor")
        took = time.perf_counter() - begin
        for name in (wname, sname):
            state = (await podman.inspect_container(name)).state.status
            if state != "running":
                raise SystemExit(f"raw pair {plan.sandbox_id}: {name} is {state} after its start")
        return took, steps["mint (fence, TLS, documents, archives)"], steps

    async def remove(self, p: RawPair) -> None:
        containers, volumes = p.names
        for name in containers:
            with contextlib.suppress(PodmanError):
                await self.podman.remove_container(name, 0)
        for volume in volumes:
            with contextlib.suppress(PodmanError):
                await self.podman.remove_volume(volume)

    async def remove_all(self) -> None:
        for p in self.made:
            await self.remove(p)
        self.made.clear()


# ---------------------------------------------------------------- podmand


@dataclass
class Watch:
    """One stream: per sandbox, when it first said Ready=True (and with which reason), and
    whether it was deleted or went out of Ready after."""

    stub: pb_grpc.ComputeDriverStub
    ready: dict[str, tuple[float, str]] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    task: asyncio.Task[None] | None = None

    def start(self) -> Watch:
        self.task = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        call = self.stub.WatchSandboxes(pb.WatchSandboxesRequest())
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            async for event in call:
                now = time.perf_counter()
                kind = event.WhichOneof("payload")
                if kind == "sandbox":
                    box = event.sandbox.sandbox
                    cond = next((c for c in box.status.conditions if c.type == "Ready"), None)
                    if cond is not None and cond.status == "True":
                        self.ready.setdefault(box.id, (now, cond.reason))
                    elif box.id in self.ready:
                        self.lost.add(box.id)
                elif kind == "deleted":
                    self.lost.add(event.deleted.sandbox_id)
                async with self.changed:
                    self.changed.notify_all()
        call.cancel()

    async def until(self, sandbox_id: str, timeout: float) -> bool:
        """Whether ``sandbox_id`` said Ready (False: deleted, or no Ready in ``timeout``)."""
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait_for(
                    lambda: sandbox_id in self.ready or sandbox_id in self.lost), timeout)
        return sandbox_id in self.ready and sandbox_id not in self.lost

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class Stamped(Counter[str]):
    """The proxy's route counter, also noting when each request passed (perf_counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[float, str]] = []

    def __setitem__(self, key: str, value: int) -> None:
        if value > self.get(key, 0):
            self.log.append((time.perf_counter(), key))
        super().__setitem__(key, value)


def rss_kb(pid: int) -> tuple[int, int]:
    """VmRSS and RssAnon of ``pid``, in kB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["RssAnon"].split()[0])


@dataclass
class Phase:
    """One podmand run's figures."""

    create: list[float] = field(default_factory=list)  # in turns with raw creates
    alone: list[float] = field(default_factory=list)  # back to back, for the RSS readings
    reasons: Counter[str] = field(default_factory=Counter)
    rss: tuple[int, int] = (0, 0)  # kB: before the timed creates
    rss_after: tuple[int, int] = (0, 0)
    present: tuple[int, int] = (0, 0)  # sandboxes Ready at each reading
    vanished: list[str] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)  # the last create's calls (a Stamped proxy)

    deltas: list[int] = field(default_factory=list)  # kB of RSS each back-to-back create added

    def per_sandbox(self, which: int) -> float:
        added = self.present[1] - self.present[0]
        return (self.rss_after[which] - self.rss[which]) / added if added > 0 else float("nan")


async def ready_count(stub: pb_grpc.ComputeDriverStub, ids: list[str]) -> int:
    listed = (await stub.ListSandboxes(pb.ListSandboxesRequest())).sandboxes
    ready = {s.id for s in listed if any(c.type == "Ready" and c.status == "True" for c in s.status.conditions)}
    return len(ready & set(ids))


async def via_podmand(daemon: Podmand, image: str, split: bool, n: int, prefix: str, m: int,
                      raw: Callable[[], Awaitable[float]] | None = None,
                      proxy: Proxy | None = None) -> tuple[Phase, list[float], Counter[str]]:
    """After WARM untimed creates (with ``raw``, a raw create after each): N podmand creates
    back to back, each until Ready, with an RSS reading before and after them; then, with
    ``raw``, N turns of a raw create and a podmand create (the raw one first on even turns,
    second on odd ones), so both sides see the same host. The raw creates' seconds (the
    timed ones)."""
    phase, made, raws, routes = Phase(), [], [], Counter[str]()
    await asyncio.to_thread(daemon.start)
    channel = grpc.aio.insecure_channel(f"unix://{daemon.socket}")
    try:
        stub = pb_grpc.ComputeDriverStub(channel)  # type: ignore[no-untyped-call]
        watch = Watch(stub).start()

        async def one(slot: str) -> float:
            for attempt in range(ATTEMPTS):
                sid = f"{prefix}{slot}{'abcdefghij'[attempt]}"
                box = request(sid, image, bundle_for(sid) if split else b"")
                made.append(sid)
                begin = time.perf_counter()
                try:
                    await stub.CreateSandbox(pb.CreateSandboxRequest(sandbox=box))
                except grpc.aio.AioRpcError as exc:
                    phase.vanished.append(f"{sid} refused: {exc.code().name} {exc.details()}")
                    print(f"  {sid}: CreateSandbox {exc.code().name}: {exc.details()}; retrying", flush=True)
                    continue
                if await watch.until(sid, READY_TIMEOUT):
                    at, reason = watch.ready[sid]
                    phase.reasons[reason] += 1
                    if proxy is not None:
                        await proxy.quiet(0.5, 10)
                        if isinstance(proxy.routes, Stamped):
                            phase.timeline = sorted([(t - begin, r) for t, r in proxy.routes.log if t >= begin]
                                                    + [(at - begin, "watch: Ready=True")])
                    return at - begin
                phase.vanished.append(sid)
                print(f"  {sid}: no Ready (deleted or vanished under the bench); retrying", flush=True)
            raise SystemExit(f"{prefix}{slot}: no Ready in {ATTEMPTS} attempts")

        for i in range(WARM):
            await one(f"w{i}")
            if raw is not None:
                await raw()
        await asyncio.sleep(SETTLE)
        phase.rss = rss_kb(daemon.pid)
        phase.present = (await ready_count(stub, made), 0)
        before = Counter(proxy.routes) if proxy is not None else Counter()
        steps = [phase.rss[0]]
        for i in range(m):  # podmand alone, back to back: its RSS growth per sandbox
            phase.alone.append(await one(f"m{i:02d}"))
            steps.append(rss_kb(daemon.pid)[0])
        phase.deltas = [b - a for a, b in itertools.pairwise(steps)]
        if proxy is not None:
            routes = proxy.routes - before
        await asyncio.sleep(SETTLE)
        phase.rss_after = rss_kb(daemon.pid)
        phase.present = (phase.present[0], await ready_count(stub, made))
        if phase.present[1] - phase.present[0] != m:
            phase.vanished.append(f"{m - (phase.present[1] - phase.present[0])} Ready sandboxes gone before the "
                                  "second RSS reading")
        for i in range(n if raw is not None else 0):  # turns of one raw and one podmand create
            assert raw is not None
            if i % 2 == 0:
                raws.append(await raw())
            phase.create.append(await one(f"{i:02d}"))
            if i % 2 == 1:
                raws.append(await raw())
        for sid in made:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await stub.DeleteSandbox(pb.DeleteSandboxRequest(sandbox_id=sid))
        await watch.close()
    finally:
        await channel.close()
        await asyncio.to_thread(daemon.stop)
    return phase, raws, routes


# ---------------------------------------------------------------- setup and clean-up


async def prime(podman: PodmanClient, image_id: str, count: int) -> list[float]:
    """Make Podman's copy of ``image_id`` for the first ``count`` free userns=auto ranges:
    rootless 4.3.1 (overlay, no idmapped mounts) chowns a copy of the image's layers the
    first time a container of it gets a new range (1-1.7 s here) and keeps it, so whichever
    phase came first would pay it. Containers created and removed; seconds per create."""
    made, took = [], []
    try:
        for i in range(count):
            name = f"bpp{RUN}{i:02d}"
            begin = time.perf_counter()
            await podman.create_container({
                "name": name, "image": image_id, "command": ["true"], "labels": {RAW_LABEL: RAW_VALUE},
                "userns": {"nsmode": "auto"},
                "idmappings": {"HostUIDMapping": False, "HostGIDMapping": False, "AutoUserNs": True,
                               "AutoUserNsOpts": {"Size": AUTO_USERNS_SIZE}},
            })
            took.append(time.perf_counter() - begin)
            made.append(name)
    finally:
        for name in made:
            with contextlib.suppress(PodmanError):
                await podman.remove_container(name, 0)
    return took


def extract_runtime(user: str, into: Path) -> str:
    """runtime:1's binary, copied where the rootless user's containers can bind it."""
    pw = pwd.getpwnam(user)
    into.mkdir(mode=0o755)
    os.chown(into, pw.pw_uid, pw.pw_gid)
    env = ["env", "-i", f"HOME={pw.pw_dir}", "PATH=/usr/bin:/bin", f"XDG_RUNTIME_DIR=/run/user/{pw.pw_uid}"]
    name = f"bench-pair-{RUN}-extract"

    def podman(*args: str) -> None:
        subprocess.run(["runuser", "-u", user, "--", *env, "podman", *args], check=True, cwd="/",
                       capture_output=True, text=True)

    podman("create", "--name", name, RUNTIME_IMAGE)
    try:
        podman("cp", f"{name}:{RUNTIME_PATH}", str(into / "openshell-sandbox"))
    finally:
        podman("rm", "-f", name)
    return str(into / "openshell-sandbox")


async def sweep(podman: PodmanClient, prefixes: tuple[str, ...]) -> list[str]:
    """Whatever this run made and left: raw objects by their run label, podmand's by the
    sandbox ids of this run; the names removed."""
    removed = []
    entries = [*await podman.list_containers([f"{RAW_LABEL}={RAW_VALUE}"]),
               *await podman.list_containers([names.SANDBOX_ID])]
    for entry in entries:
        labels = entry.labels or {}
        if labels.get(RAW_LABEL) == RAW_VALUE or labels.get(names.SANDBOX_ID, "").startswith(prefixes):
            with contextlib.suppress(PodmanError):
                if await podman.remove_container(entry.id, 0):
                    removed.append(f"container {(entry.names or [entry.id])[0]}")
    for volume in [*await podman.list_volumes([f"{RAW_LABEL}={RAW_VALUE}"]),
                   *await podman.list_volumes([names.SANDBOX_ID])]:
        labels = volume.labels or {}
        if labels.get(RAW_LABEL) == RAW_VALUE or labels.get(names.SANDBOX_ID, "").startswith(prefixes):
            with contextlib.suppress(PodmanError):
                if await podman.remove_volume(volume.name):
                    removed.append(f"volume {volume.name}")
    return removed


# ---------------------------------------------------------------- the run


@dataclass
class Bench:
    args: argparse.Namespace
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix=f"podmand-bench-pair-{RUN}-")))
    daemons: list[Podmand] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what disturbed the run
    phase: str = "setup"

    async def strangers(self, podman: PodmanClient, when: str) -> None:
        """Note podmand sandboxes not of this run (an e2e session on the same Podman): their
        events reach this run's podmand too, and they share the two cores."""
        found = {(e.labels or {}).get(names.SANDBOX_ID, "")
                 for e in await podman.list_containers([f"{names.OWNER}={names.OWNER_VALUE}"])}
        others = sorted(sid for sid in found if not sid.startswith(tuple(f"{p}{RUN}" for p in PREFIXES)))
        if others:
            self.notes.append(f"{len(others)} other podmand sandboxes {when}")

    async def look_out(self) -> None:
        """Note, once a second, any pytest process on the host (the lead's unit or e2e runs:
        they share the two cores, and an e2e session start removes podmand's sandboxes)."""
        while True:
            for entry in Path("/proc").iterdir():
                with contextlib.suppress(OSError):
                    if entry.name.isdigit() and b"pytest" in (entry / "cmdline").read_bytes():
                        note = f"pytest running during {self.phase}"
                        if note not in self.notes:
                            self.notes.append(note)
                        break
            await asyncio.sleep(1)

    def daemon(self, env: dict[str, str], socket: str = "") -> Podmand:
        d = Podmand(self.args.user, socket or self.args.podman, pex=self.args.pex, env=env)
        self.daemons.append(d)
        return d

    async def run(self, podman: PodmanClient, settings: Settings) -> None:
        n, m, user = self.args.n, self.args.m or self.args.n, self.args.user
        os.chmod(self.work, 0o755)
        version = (await podman.info()).version.version
        print(f"bench/pair_lifecycle.py, run {RUN}: N = {n}, Podman {version}, pex {self.args.pex}; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        runtime_bin = await asyncio.to_thread(extract_runtime, user, self.work / "runtime")
        raw = Raw(podman, settings, runtime_bin, await podman.inspect_image(WORKLOAD_IMAGE),
                  (await podman.inspect_image(SUPERVISOR2_IMAGE)).id)

        count = 2 * WARM + 2 * n + m + PRIME_SPARE  # raw and podmand sandboxes live side by side
        took = await prime(podman, (await podman.inspect_image(WORKLOAD_IMAGE)).id, count)
        slow = sum(t > 0.5 for t in took)
        print(f"primed {WORKLOAD_IMAGE} at {count} userns ranges: {slow} new (over 0.5 s, max {max(took):.2f} s)",
              flush=True)
        await self.strangers(podman, "before split")
        print("split: raw and podmand ...", flush=True)
        self.phase = "split"
        mints: list[float] = []
        steps: list[dict[str, float]] = []

        async def raw_pair() -> float:
            for attempt in range(ATTEMPTS):
                p = raw.pair(f"bpr{RUN}{len(steps):02d}{'abcdefghij'[attempt]}")
                try:
                    took, mint, step = await raw.create(p)
                except PodmanError as exc:  # seen once under load: an archive's helper process gone
                    self.notes.append(f"raw pair {p.plan.sandbox_id}: {exc}")
                    print(f"  raw pair {p.plan.sandbox_id}: {exc}; retrying", flush=True)
                    await raw.remove(p)
                    continue
                mints.append(mint)
                steps.append(step)
                return took
            raise SystemExit(f"no raw pair in {ATTEMPTS} attempts")

        try:
            pd_split, raw_split, _ = await via_podmand(self.daemon(SPLIT), WORKLOAD_IMAGE, True, n, f"bps{RUN}", m,
                                                       raw_pair)
        finally:
            await raw.remove_all()
        mints, steps = mints[WARM:], steps[WARM:]


        routes: Counter[str] = Counter()
        counted = Phase()
        if self.args.calls:
            await self.strangers(podman, "before calls")
            print("calls ...", flush=True)
            self.phase = "calls"
            pw = pwd.getpwnam(user)
            proxy = Proxy(self.args.podman, str(self.work / "proxy.sock"))
            proxy.routes = Stamped()
            await proxy.start(pw.pw_uid, pw.pw_gid)
            counted, _, routes = await via_podmand(self.daemon(SPLIT, proxy.path), WORKLOAD_IMAGE, True,
                                                   self.args.calls, f"bpc{RUN}", self.args.calls, proxy=proxy)
        await self.strangers(podman, "at the end")
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
        report(n, raw_split, mints, pd_split, routes, self.args.calls)
        if self.args.calls:
            print("the last counted create, ms from CreateSandbox (request sent to Podman):")
            for t, what in counted.timeline:
                print(f"  {t * 1000:7.1f}  {what}")
        print("raw split, median per step:")
        for what in steps[0]:
            print(f"  {statistics.median(s[what] for s in steps) * 1000:7.1f} ms  {what}")
        vanished = pd_split.vanished
        if vanished or self.notes:
            print(f"DISTURBED ({'; '.join([*self.notes, *vanished])}): rerun with nothing else on this Podman")

    async def cleanup(self, podman: PodmanClient) -> None:
        for d in self.daemons:
            d.cleanup()
        prefixes = tuple(f"{p}{RUN}" for p in PREFIXES)
        removed = await sweep(podman, prefixes)
        print(f"clean-up: {len(removed)} left, now removed: {', '.join(removed) or 'none'}", flush=True)
        subprocess.run(["rm", "-rf", str(self.work)], check=False)


def paired(podmand: list[float], raw: list[float]) -> float:
    """The median of each podmand create over the raw create made next to it."""
    return statistics.median(p / r for p, r in zip(podmand, raw, strict=True))


def report(n: int, raw_split: list[float], mints: list[float], pd_split: Phase, routes: Counter[str],
           calls: int) -> None:
    med = statistics.median
    calls_only = [t - m for t, m in zip(raw_split, mints, strict=True)]
    print(f"\n{n} turns of a raw and a podmand create, one at a time (median, max)")
    print(f"raw calls {ms(raw_split)} (of which minting {med(mints) * 1000:.1f} ms; calls alone "
          f"{med(calls_only) * 1000:.1f} ms) | podmand {ms(pd_split.create)} | "
          f"x{med(pd_split.create) / med(raw_split):.2f} (median of pairs x{paired(pd_split.create, raw_split):.2f})")
    print(f"podmand back to back (the RSS stretch): {ms(pd_split.alone)}")
    print(f"podmand RSS: {pd_split.rss[0]} -> {pd_split.rss_after[0]} kB with "
          f"{pd_split.present[0]} -> {pd_split.present[1]} sandboxes: {pd_split.per_sandbox(0):.1f} kB/sandbox "
          f"(anonymous {pd_split.rss[1]} -> {pd_split.rss_after[1]} kB: {pd_split.per_sandbox(1):.1f}); "
          f"median of each create's step {med(pd_split.deltas):.1f} kB (steps {pd_split.deltas}); "
          f"Ready reasons {dict(pd_split.reasons)}")
    if routes:
        print(f"libpod calls per create through podmand (over {calls}):")
        for route, c in sorted(routes.items(), key=lambda kv: -kv[1]):
            print(f"  {c / calls:5.2f}  {route}")


async def main_async(args: argparse.Namespace) -> None:
    bench = Bench(args)
    watcher = asyncio.create_task(bench.look_out())
    settings = loading.load(environ={"OPENSHELL_STOP_TIMEOUT": "5", **SPLIT}, checks=())
    podman = PodmanClient(args.podman, log_size_max=settings.log_size_max)  # as podmand's (server.py)
    try:
        await bench.run(podman, settings)
    finally:
        watcher.cancel()
        await bench.cleanup(podman)
        await podman.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pex", default=str(Path(__file__).resolve().parents[1] / "dist" / "podmand.pex"))
    parser.add_argument("-n", type=int, default=8, help="timed turns of a raw and a podmand create")
    parser.add_argument("-m", type=int, default=0, help="podmand creates between the RSS readings (default: n)")
    parser.add_argument("--calls", type=int, default=3, help="split creates counted by route (0: none)")
    parser.add_argument("--user", default=os.environ.get("PODMAND_TEST_USER", "podmand"))
    parser.add_argument("--podman", default="")
    args = parser.parse_args()
    rootless_target(args, "it runs podmand as the rootless user and reads its /proc")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
