"""Sandbox lifecycle on Podman: what each RPC does, independent of gRPC.

State lives in Podman (labels) and in podmand's state directory.  The driver
composes the owners of what podmand keeps in memory: provisioning (sandboxes
with no container yet), the observer (what inspect said, exit detection),
workspace networks and garbage collection.  It is given an event sink; what it
publishes reaches the watch streams through it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import DriverError, FailedPrecondition, InvalidArgument, NotFound, Unauthenticated
from ..host import hostgateway
from ..libpod import ContainerListEntry, PodmanClient, PodmanError
from ..locks import LockTable
from ..sandbox import imagefiles
from ..sandbox.cdi import GpuSelector
from ..sandbox.files import SandboxFiles
from ..sandbox.plan import Plan
from ..sandbox.spec import check_name
from ..security import admission, tokens
from ..security.credentials import BadCredential, CredentialSigner
from . import lookup, records
from .events import EventSink, deleted_event
from .garbage import Collector, remove_rootfs_image
from .images import Images
from .index import Index
from .networks import Networks
from .observer import Observer
from .pending import Pending
from .provisioning import Provisioner
from .tasks import Tasks
from .validation import Validator

log = logging.getLogger("podmand.driver")


class Driver:
    def __init__(self, settings: Settings, podman: PodmanClient, state_dir: Path, sink: EventSink) -> None:
        self.settings = settings
        self.podman = podman
        self.state_dir = state_dir
        self.sink = sink
        self.files = SandboxFiles(state_dir)
        self.signer = CredentialSigner(state_dir / "credential.key")
        self.tasks = Tasks()
        self.locks = LockTable()  # per sandbox id (and "net:<network>"): an entry only while in use
        self._deleting: set[str] = set()  # sandboxes a DeleteSandbox is removing
        self.index = Index()  # sandbox -> its containers, kept by the hub (index.py)
        self._next_gc = 0.0  # monotonic time of the next garbage collection
        self.validator = Validator(podman, settings, state_dir, Images(podman, self.tasks))
        self.networks = Networks(
            podman, settings, self.locks, lambda: self.provisioning.workspaces(),
            lambda net: self.index.members(self.networks.name, net),
        )
        self.provisioning = Provisioner(
            podman, settings, state_dir, self.files, sink, self.tasks, self.locks, self.networks, self.validator,
            self.signer, self.index,
        )
        self.observer = Observer(podman, settings, self.files, sink, self.tasks, self.index)
        self.collector = Collector(
            podman, settings, state_dir, self.files, self.locks, self.networks,
            pending=self.provisioning.workspaces, deleting=lambda: self._deleting,
        )

    @property
    def gpus(self) -> GpuSelector:
        return self.validator.gpus

    async def close(self) -> None:
        """Cancel background work; durable intent lets the next start resume it."""
        self.observer.close()
        await self.tasks.close()

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
        for entry in await lookup.containers(self.podman):
            sandbox_id = (entry.labels or {}).get(names.SANDBOX_ID, "")
            if not sandbox_id or sandbox_id in seen:
                continue
            seen.add(sandbox_id)
            out.append(self.observer.from_list(entry, sandbox_id))
        out += self.provisioning.snapshots(besides=seen)
        out.sort(key=lambda s: (s.name, s.id))
        return out

    # ------------------------------------------------------------ the event path (the hub's contract)

    async def observe(self, container_id: str) -> pb.DriverSandbox | None:
        """A fresh snapshot of one container (None when it is gone), as the streams see it."""
        return await self.observer.observe(container_id)

    async def listed(self) -> list[ContainerListEntry]:
        """Every managed container, from one list; the index learns each of them."""
        entries = await lookup.containers(self.podman)
        self.index.learn(entries)
        self.index.loaded()
        return entries

    def unwatched(self) -> None:
        """The hub lost Podman's event stream: the index may miss what happens meanwhile."""
        self.index.unload()

    def pending(self, besides: set[str]) -> list[pb.DriverSandbox]:
        """Snapshots of sandboxes that have no container (yet), other than ``besides``."""
        return self.provisioning.snapshots(besides=besides)

    def creating(self, sandbox_id: str) -> bool:
        """Whether podmand itself is still creating the sandbox's container."""
        return self.provisioning.get(sandbox_id) is not None

    def changed(self, entry: ContainerListEntry) -> bool:
        """Whether a list shows the container other than the hub last observed it."""
        return self.index.changed(entry)

    async def forget(self, sandbox_id: str, container_id: str = "") -> bool:
        """A container was found gone (``container_id``; "" when a resync no longer lists
        the sandbox): if it was removed out of band, clean up what podmand made for its
        sandbox.  True when the sandbox is gone and Deleted should be sent.  A container
        no longer indexed was forgotten already (a DeleteSandbox removed it and said
        Deleted): that costs no Podman call."""
        known = self.index.get(container_id) if container_id else None
        if container_id:  # gone either way: what podmand kept of it goes
            self.observer.drop(container_id)
        if not names.is_id(sandbox_id):  # a label podmand did not write: nothing of ours to clean
            return False
        if sandbox_id in self._deleting or self.provisioning.get(sandbox_id) is not None:
            return False
        if container_id and known is None and self.index.ready:
            return False
        async with self.locks[sandbox_id]:
            found = await lookup.find_indexed(self.podman, self.index, sandbox_id)
            if found is not None or self.provisioning.get(sandbox_id) is not None:
                return False
            existed, workspace = await self._remove_everything(sandbox_id)
        if workspace is not None:
            await self.networks.remove_unused(workspace)
        # It existed if podmand knew the container or had told of the sandbox (a resync),
        # or found something of it now; else a DeleteSandbox got there first.
        return existed or known is not None or not container_id

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

    async def resume(self) -> int:
        return await records.resume(self.provisioning)

    # ------------------------------------------------------------ stop / start

    async def stop(self, sandbox_id: str) -> None:
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        async with self.locks[sandbox_id]:
            entry = await self._container_or_pending(sandbox_id)
            if isinstance(entry, Pending):
                made = await self.provisioning.stop_early(entry)
                if made:  # a container Podman made after all: the hub reports it stopped
                    self.sink.refresh(made, sandbox_id)
                return
            await self._stop_container(sandbox_id, entry)
        self.sink.refresh(entry.id, sandbox_id)

    async def _container_or_pending(self, sandbox_id: str) -> ContainerListEntry | Pending:
        """The sandbox's container, or else its create still being provisioned; NotFound
        when it has neither."""
        entry = await lookup.find_indexed(self.podman, self.index, sandbox_id)
        if entry is not None:
            return entry
        pending = self.provisioning.get(sandbox_id)
        if pending is None:
            raise NotFound("sandbox not found")
        return pending

    async def _stop_container(self, sandbox_id: str, entry: ContainerListEntry) -> None:
        """Stop the sandbox's container and wait for it; reported as stopped (Suspended), not as an exit."""
        self.files.mark_stopped(sandbox_id, entry.id)
        try:
            if entry.state == "paused":
                await self.podman.unpause_container(entry.id)
            if entry.state not in ("exited", "stopped", "created", "configured"):
                await self.podman.stop_container(entry.id, self.settings.stop_timeout)
            await self._wait_stopped(entry.id)
        except BaseException:
            self.files.clear_stopped(sandbox_id)
            raise

    async def _wait_stopped(self, container_id: str) -> None:
        deadline = time.monotonic() + self.settings.stop_timeout + 5
        while True:
            info = await self.podman.inspect_container(container_id)
            if info.state.status in ("exited", "stopped", "created", "configured"):
                return
            if time.monotonic() > deadline:
                raise DriverError(f"container {container_id[:12]} did not stop in time (state {info.state.status})")
            await asyncio.sleep(0.05)

    async def start(
        self,
        sandbox_id: str,
        *,
        launch_authentication: bytes = b"",
        generation_id: str = "",
        expected_runtime_identity: str = "",
    ) -> str:
        """Start a stopped sandbox (idempotent); the new runtime identity.

        A fresh launch bundle's token and podmand's credential for the new
        generation replace the old files before the container starts. A running
        sandbox is restarted when the request starts a new generation (a new
        ``generation_id``, or a bundle for another runtime generation): the
        supervisor reads its token once, at start. A retry of the same
        transition changes nothing."""
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        if generation_id:
            tokens.check_generation("generation_id", generation_id)
        bundle = (
            tokens.decode_launch_authentication(launch_authentication, "launch_authentication")
            if launch_authentication
            else None
        )
        if bundle is not None:  # its token becomes the sandbox's: it must be this sandbox's
            where = "launch_authentication.supervisor.gateway_token"
            tokens.check_sandbox_token(bundle.supervisor.gateway_token, sandbox_id, where=where)
        identity = self.provisioning.runtime_identity
        async with self.locks[sandbox_id]:
            entry = await self._container_or_pending(sandbox_id)
            if isinstance(entry, Pending):
                _check_expected(expected_runtime_identity, entry.instance)
                await self.provisioning.resume_stopped(entry)  # admission under today's policy
                return identity(sandbox_id, entry.instance)
            instance = (entry.labels or {}).get(names.INSTANCE, "")
            _check_expected(expected_runtime_identity, instance)
            wanted = generation_id or (bundle.supervisor.runtime_generation if bundle else "")
            running = entry.state == "running"
            if running and (not wanted or wanted == self.files.generation(sandbox_id)):
                self.files.clear_stopped(sandbox_id)
                return identity(sandbox_id, instance)
            await admission.admit_start(self.podman, self.settings, str(self.state_dir), entry.id, entry.labels or {})
            if bundle is None and self.settings.require_launch_auth:
                raise FailedPrecondition("launch_authentication: podmand is configured to require it")
            if running:
                log.info("sandbox %s: restarting for generation %s", sandbox_id, wanted)
                await self._stop_container(sandbox_id, entry)
            if bundle is not None:
                self.files.write_secrets(sandbox_id, bundle.supervisor.gateway_token, {})
            self.provisioning.new_generation(sandbox_id, instance, wanted or uuid.uuid4().hex[:16])
            try:
                await self.podman.start_container(entry.id)
            except PodmanError as exc:  # still reported as stopped (the marker stays)
                if hostgateway.unresolved(exc.message):
                    raise FailedPrecondition(hostgateway.explanation(exc.message)) from exc
                raise DriverError(f"starting the sandbox container failed: {exc.message}") from exc
            self.files.clear_stopped(sandbox_id)
        self.sink.refresh(entry.id, sandbox_id)
        return identity(sandbox_id, instance)

    async def authenticate(self, credential: str) -> tuple[str, str]:
        """Check podmand's own bootstrap credential: (sandbox id, runtime identity)."""
        try:
            claims = self.signer.verify(credential)
        except BadCredential as exc:
            raise Unauthenticated(f"credential rejected: {exc}") from exc
        try:
            check_name("sandbox_id", claims.sandbox_id, required=True)
        except InvalidArgument as exc:
            raise Unauthenticated(f"credential rejected: {exc.message}") from exc
        entry = await lookup.find_indexed(self.podman, self.index, claims.sandbox_id)
        if entry is None or (entry.labels or {}).get(names.INSTANCE) != claims.instance:
            raise Unauthenticated("credential rejected: its sandbox no longer exists")
        if self.files.generation(claims.sandbox_id) != claims.generation:
            raise Unauthenticated("credential rejected: it belongs to an earlier start of the sandbox")
        return claims.sandbox_id, names.runtime_identity(claims.instance, claims.generation)

    # ------------------------------------------------------------ delete

    async def delete(self, sandbox_id: str) -> bool:
        check_name("sandbox_id", sandbox_id, required=True)  # before any file or Podman call
        self._deleting.add(sandbox_id)
        try:
            async with self.locks[sandbox_id]:
                existed, workspace = await self._remove_everything(sandbox_id)
        finally:
            self._deleting.discard(sandbox_id)
        if existed:
            self.sink.publish(deleted_event(sandbox_id))
        if workspace is not None:
            await self.networks.remove_unused(workspace)
        return existed

    async def _remove_everything(self, sandbox_id: str) -> tuple[bool, str | None]:
        existed = False
        workspace: str | None = None
        pending = await self.provisioning.discard(sandbox_id)
        if pending is not None:
            existed, workspace = True, pending.plan.workspace
        # Listed or inspected means it existed, even when the removal then finds
        # it already gone (Podman says 500 "no such ..." under load): Deleted follows.
        for entry in await lookup.all_indexed(self.podman, self.index, sandbox_id):
            workspace = (entry.labels or {}).get(names.SANDBOX_WORKSPACE, "")
            self.observer.drop(entry.id)
            await self.podman.remove_container(entry.id, self.settings.stop_timeout)
            existed = True
        volume = await self.podman.inspect_volume(names.volume_name(sandbox_id))
        if volume is not None:
            if workspace is None:
                workspace = (volume.labels or {}).get(names.SANDBOX_WORKSPACE)
            await remove_rootfs_image(self.podman, (volume.labels or {}).get(names.ROOTFS_IMAGE, ""))
            await self.podman.remove_volume(volume.name)
            existed = True
        self.files.remove(sandbox_id)
        return existed, workspace

    # ------------------------------------------------------------ workspaces

    async def ensure_workspace(self, workspace: str) -> None:
        await self.networks.ensure_workspace(workspace)

    async def delete_workspace(self, workspace: str) -> None:
        await self.networks.delete_workspace(workspace)


def _check_expected(expected: str, instance: str) -> None:
    if expected and names.stable_identity(expected) != names.stable_identity(names.runtime_identity(instance, "")):
        raise FailedPrecondition(
            "expected_runtime_identity: the sandbox's container was replaced out of band; recreate the sandbox"
        )
