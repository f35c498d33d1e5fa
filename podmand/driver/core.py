"""Sandbox lifecycle on Podman: what each RPC does, independent of gRPC.

The driver is every RPC's entry point and the hub's contract (the event path): it
checks each request before any file or Podman call and hands it to the owner of
that work, answering reads itself. State lives in Podman (labels) and in podmand's
state directory; the driver composes the owners of what podmand keeps in memory:
provisioning (sandboxes with no container yet), the observer (what inspect said,
exit detection), stop and start (startstop.py), removal, workspace networks and
garbage collection.  It is given an event sink; what it publishes reaches the
watch streams through it.
"""

from __future__ import annotations

import time
from pathlib import Path

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import FailedPrecondition, NotFound
from ..libpod import ContainerListEntry, PodmanClient, VolumeInspect
from ..locks import LockTable
from ..sandbox import imagefiles
from ..sandbox.cdi import GpuSelector
from ..sandbox.files import SandboxFiles
from ..sandbox.plan import Plan
from ..sandbox.spec import check_name, launch_bundle
from ..security import tokens
from . import lookup, pairs, records
from .context import Context
from .events import EventSink
from .garbage import Collector
from .images import Images
from .index import Index
from .networks import Networks
from .observer import Observer
from .provisioning import Provisioner
from .removal import Removal
from .startstop import StartStop
from .tasks import Tasks
from .validation import Validator


class Driver:
    def __init__(self, settings: Settings, podman: PodmanClient, state_dir: Path, sink: EventSink) -> None:
        self.settings = settings
        self.podman = podman
        self.state_dir = state_dir
        self.sink = sink
        self.files = SandboxFiles(state_dir)
        self.tasks = Tasks()
        self.locks = LockTable()  # per sandbox id (and "net:<network>"): an entry only while in use
        self.index = Index()  # sandbox -> its containers, kept by the hub (index.py)
        self._next_gc = 0.0  # monotonic time of the next garbage collection
        # The hub's latest list until resume() takes it (then None for good): start-up
        # reads what the hub's first list said instead of listing every container again.
        self._unresumed: list[ContainerListEntry] | None = None
        # The supervisors in the hub's latest list: its first snapshots fold them in.
        self._listed_supervisors: dict[str, ContainerListEntry] = {}
        self._resumed = False
        self.validator = Validator(podman, settings, state_dir, Images(podman, self.tasks))
        self.networks = Networks(
            podman, settings, self.locks, lambda: self.provisioning.workspaces(),
            lambda net: self.index.members(self.networks.name, net),
        )
        ctx = Context(podman, settings, state_dir, self.files, sink)
        self.provisioning = Provisioner(
            ctx, self.tasks, self.locks, self.validator, self.index,
        )
        self.observer = Observer(
            podman, settings, self.files, sink, self.tasks, self.index,
            busy=self._hands_off,
        )
        self.startstop = StartStop(ctx, self.locks, self.index, self.provisioning)
        self.removal = Removal(ctx, self.locks, self.index, self.networks, self.observer, self.provisioning)
        self.collector = Collector(
            podman, settings, state_dir, self.files, self.locks, self.networks,
            pending=self.provisioning.workspaces, deleting=lambda: self.removal.deleting,
        )

    @property
    def gpus(self) -> GpuSelector:
        return self.validator.gpus

    def _hands_off(self, sandbox_id: str) -> bool:
        """Whether the observer leaves a pair as it is: a create, start or stop of it is under
        way here (its pair is in flux); its create is unfinished (the launch bundle is still in
        the state directory: provisioning, or the resume after a restart, finishes it, and may
        not have taken it up yet); or it is another podmand's, sharing this Podman (this state
        directory has no generation of it, which every pair made here records once made): that
        one makes and mends its own pairs."""
        if self.locks.locked(sandbox_id) or self.provisioning.get(sandbox_id) is not None:
            return True
        try:
            return self.files.making(sandbox_id) or not self.files.generation(sandbox_id)
        except ValueError:
            return True

    async def close(self) -> None:
        """Cancel background work (durable intent lets the next start resume it), then
        leave no image reader behind: those being removed are waited for, those Podman
        did not remove are asked for once more (the caller bounds the whole)."""
        self.observer.close()
        await self.tasks.close()
        await imagefiles.settle(self.podman)

    # ------------------------------------------------------------ reads (no side effects)

    async def get(self, sandbox_id: str) -> pb.DriverSandbox:
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        for container_id in self.index.containers(sandbox_id) or ():  # one inspect when indexed
            snap = await self.observer.read(container_id)
            if snap is not None and snap.id == sandbox_id:
                return snap
        entry = await lookup.find(self.podman, sandbox_id)
        if entry is not None:
            snap = await self.observer.read(entry.id)
            if snap is not None:
                return snap
        pending = self.provisioning.get(sandbox_id)
        if pending is not None:
            return pending.snapshot()
        raise NotFound("sandbox not found")

    async def list_sandboxes(self) -> list[pb.DriverSandbox]:
        """Every managed sandbox from one Podman list call plus those still provisioning."""
        out = []
        seen = set()
        entries, supervisors = await lookup.with_supervisors(self.podman)
        for entry in entries:
            sandbox_id = (entry.labels or {}).get(names.SANDBOX_ID, "")
            if not sandbox_id or sandbox_id in seen:
                continue
            seen.add(sandbox_id)
            out.append(self.observer.from_list(entry, sandbox_id, supervisors))
        out += self.provisioning.snapshots(besides=seen)
        out.sort(key=lambda s: (s.name, s.id))
        return out

    # ------------------------------------------------------------ the event path (the hub's contract)

    async def observe(self, container_id: str) -> pb.DriverSandbox | None:
        """A fresh snapshot of one container (None when it is gone), as the streams see it."""
        return await self.observer.observe(container_id)

    async def listed(self) -> list[ContainerListEntry]:
        """Every managed container, from one list; the index learns each of them."""
        entries, self._listed_supervisors = await lookup.with_supervisors(self.podman)
        self.index.learn(entries)
        self.index.loaded()
        if not self._resumed:
            self._unresumed = entries
        return entries

    def first_snapshot(self, entry: ContainerListEntry) -> pb.DriverSandbox | None:
        """What streams are told of a listed container before anything inspected it
        (observer.py's ``from_list`` says what that may lack); None: not a sandbox's."""
        sandbox_id = (entry.labels or {}).get(names.SANDBOX_ID, "")
        return self.observer.from_list(entry, sandbox_id, self._listed_supervisors) if sandbox_id else None

    def unwatched(self) -> None:
        """The hub lost Podman's event stream: the index may miss what happens meanwhile."""
        self.index.unload()

    def pending(self, besides: set[str]) -> list[pb.DriverSandbox]:
        """Snapshots of sandboxes that have no container (yet), other than ``besides``."""
        return self.provisioning.snapshots(besides=besides)

    def creating(self, sandbox_id: str) -> bool:
        """Whether podmand itself is still creating the sandbox's container."""
        return self.provisioning.get(sandbox_id) is not None

    def workload_of(self, sandbox_id: str) -> str | None:
        """The container the sandbox is reported by (a pair's workload), as the index knows it."""
        ids = self.index.containers(sandbox_id)
        return ids[0] if ids else None

    def changed(self, entry: ContainerListEntry) -> bool:
        """Whether a list shows the container other than the hub last observed it, or shows
        a pair of this podmand's whose halves are at odds (``pairs.at_odds``: its look mends it)."""
        if self.index.changed(entry):
            return True
        labels = entry.labels or {}
        if labels.get(names.ISOLATION_ROLE) != names.ROLE_WORKLOAD:
            return False
        sandbox_id = labels.get(names.SANDBOX_ID, "")
        return pairs.at_odds(entry, self._listed_supervisors.get(sandbox_id)) and not self._hands_off(sandbox_id)

    async def forget(self, sandbox_id: str, container_id: str = "") -> bool:
        """A container was found gone: what podmand made for its sandbox, if that was
        removed out of band, goes too (removal.py); True when Deleted should be sent."""
        return await self.removal.forget(sandbox_id, container_id)

    async def collect_garbage(self) -> list[str]:
        """Remove podmand's leftovers, at most every quarter of ``gc_grace`` (nothing is
        collected younger than that anyway): each pass lists containers, volumes,
        networks and images, Podman work that an idle host should not pay every resync.
        Image readers whose removal Podman did not answer go at every call."""
        removed = await imagefiles.remove_unremoved(self.podman)  # a call each, only after a failure
        now = time.monotonic()
        if now < self._next_gc:
            return removed
        self._next_gc = now + self.settings.gc_grace / 4
        return removed + await self.collector.collect()

    # ------------------------------------------------------------ create

    async def validate(self, sandbox: pb.DriverSandbox | None) -> Plan:
        return await self.validator.validate(sandbox)

    async def create(self, sandbox: pb.DriverSandbox | None) -> str:
        return await records.create(self.provisioning, sandbox)

    async def recorded(self) -> list[VolumeInspect]:
        """What the volumes record (records.py); serve reads it while its probes run."""
        return await records.recorded(self.provisioning)

    async def resume(self, recorded: list[VolumeInspect] | None = None) -> int:
        """Finish what the volumes record (records.py), as read by :meth:`recorded` (here,
        when not given), and from the hub's list when one is back (serve resumes once the
        hub is connected: its first list is), else from a list of its own."""
        listed, self._unresumed, self._resumed = self._unresumed, None, True
        volumes = recorded if recorded is not None else await self.recorded()
        return await records.resume(self.provisioning, volumes, listed)

    # ------------------------------------------------------------ stop / start

    async def stop(self, sandbox_id: str) -> None:
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        await self.startstop.stop(sandbox_id)

    async def start(
        self,
        sandbox_id: str,
        *,
        launch_authentication: bytes = b"",
        generation_id: str = "",
        expected_runtime_identity: str = "",
    ) -> str:
        """Start a stopped sandbox (idempotent); the new runtime identity. The request is
        checked here, before any file or Podman call; startstop.py starts it."""
        check_name("sandbox_id", sandbox_id, required=True)
        if generation_id:
            tokens.check_generation("generation_id", generation_id)
        if not launch_authentication:  # every start re-mints the pair's session from it
            raise FailedPrecondition("launch_authentication: required (OpenShell 0.1.x's Sandbox Protocol)")
        # its gateway token becomes the supervisor's: it must be this sandbox's
        bundle = launch_bundle(launch_authentication, sandbox_id, "launch_authentication")
        return await self.startstop.start(sandbox_id, bundle, generation_id, expected_runtime_identity,
                                          launch_authentication)

    # ------------------------------------------------------------ delete

    async def delete(self, sandbox_id: str) -> bool:
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        return await self.removal.delete(sandbox_id)

    # ------------------------------------------------------------ workspaces

    async def ensure_workspace(self, workspace: str) -> None:
        await self.networks.ensure_workspace(workspace)

    async def delete_workspace(self, workspace: str) -> None:
        await self.networks.delete_workspace(workspace)

