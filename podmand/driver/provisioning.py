"""Creates from recorded request to running container, in the background.

Once records.py has recorded a create, pulling, importing, creating and
starting continue in a task and are reported on the watch stream.  Until its
container exists a sandbox is :class:`~podmand.driver.pending.Pending`, owned here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import DriverError, FailedPrecondition, InvalidArgument
from ..host import hostgateway
from ..libpod import ImageInspect, PodmanClient, PodmanError, PodmanUnavailable
from ..locks import LockTable
from ..sandbox import imagechecks, proxy, rootfs, selinux, snapshots
from ..sandbox.files import SandboxFiles
from ..sandbox.plan import Plan, Provision
from ..sandbox.snapshots import Condition
from ..sandbox.spec import container_spec, filtered_user_env
from ..sandbox.supervisor import SupervisorCache
from ..security import admission
from ..security.credentials import CredentialSigner
from .events import EventSink, platform_event, sandbox_event
from .index import Index
from .lookup import find
from .networks import Networks
from .pending import STOPPED_EARLY, STOPPED_EARLY_MESSAGE, Pending, ProvisionFailed
from .pulls import Puller, supervisor_pull_policy
from .tasks import Tasks, cancel
from .validation import Validator, image_refusal

log = logging.getLogger("podmand.driver")

ROOTFS_FAILED = "RootfsImportFailed"
IMAGE_REFUSED = "ImageRefused"  # terminal: the image itself is what is wrong (imagechecks.py)


class Relabel:
    """Whether podmand's own bind mounts get SELinux labels (selinux.py); with
    ``selinux = auto``, Podman is asked once."""

    def __init__(self, podman: PodmanClient, setting: str) -> None:
        self.podman = podman
        self.setting = setting
        self._decided: bool | None = None

    async def __call__(self) -> bool:
        if self._decided is None:
            enabled = False
            if self.setting == "auto":
                enabled, source = selinux.detect((await self.podman.served_info()).host.security.selinuxEnabled)
                log.info("SELinux is %s (from %s)", "enabled" if enabled else "not enabled", source)
            self._decided = selinux.relabel(self.setting, enabled)
            log.info("podmand's own bind mounts %s SELinux labels", "carry" if self._decided else "carry no")
        return self._decided


class Provisioner:
    """Owns the pending sandboxes; everything else it uses is given."""

    def __init__(
        self,
        podman: PodmanClient,
        settings: Settings,
        state_dir: Path,
        files: SandboxFiles,
        sink: EventSink,
        tasks: Tasks,
        locks: LockTable,
        networks: Networks,
        validator: Validator,
        signer: CredentialSigner,
        index: Index,
    ) -> None:
        self.podman = podman
        self.settings = settings
        self.state_dir = state_dir
        self.files = files
        self.sink = sink
        self.tasks = tasks
        self.locks = locks
        self.networks = networks
        self.validator = validator
        self.puller = Puller(podman, settings, sink)
        self.images = validator.images
        self.supervisor = SupervisorCache(podman, state_dir)
        self.signer = signer
        self.index = index  # the hub's sandbox -> containers (read only here)
        self.relabel = Relabel(podman, settings.selinux)
        self._pending: dict[str, Pending] = {}

    # ------------------------------------------------------------ the pending table

    def get(self, sandbox_id: str) -> Pending | None:
        return self._pending.get(sandbox_id)

    def workspaces(self) -> Mapping[str, str]:
        """Pending sandbox id -> workspace."""
        return {sid: p.plan.workspace for sid, p in self._pending.items()}

    def snapshots(self, besides: set[str]) -> list[pb.DriverSandbox]:
        """Snapshots of the pending sandboxes whose ids are not in ``besides``."""
        return [p.snapshot() for sid, p in self._pending.items() if sid not in besides]

    def add(self, pending: Pending) -> None:
        self._pending[pending.plan.sandbox_id] = pending

    def rootfs_tars(self) -> list[str]:
        """The staged tars that pending creates are still to import."""
        return [p.plan.rootfs_tar for p in self._pending.values() if p.plan.rootfs_tar]

    async def discard(self, sandbox_id: str) -> Pending | None:
        """Stop provisioning ``sandbox_id`` for good (it is being deleted)."""
        pending = self._pending.pop(sandbox_id, None)
        if pending is not None:
            await cancel(pending.task)
            await _finished(pending)  # the delete then finds the container Podman made
            if pending.plan.rootfs_tar:
                rootfs.remove_slot(pending.plan.rootfs_tar, self.settings)
        return pending

    def runtime_identity(self, sandbox_id: str, instance: str) -> str:
        return names.runtime_identity(instance, self.files.generation(sandbox_id) or "0")

    def new_generation(self, sandbox_id: str, instance: str, generation: str) -> None:
        """Record the generation and mint podmand's credential for it (the old one stops working)."""
        self.files.write(sandbox_id, "driver.credential", self.signer.mint(sandbox_id, instance, generation).encode())
        self.files.set_generation(sandbox_id, generation)

    def start(self, plan: Plan, instance: str) -> None:
        """Make ``plan`` pending, announce it, and provision it in the background."""
        ready = Condition("False", "Starting", f"Sandbox accepted; preparing image {plan.image}", snapshots.now())
        pending = Pending(plan, instance, ready)
        self._pending[plan.sandbox_id] = pending
        self.sink.publish(sandbox_event(pending.snapshot()))
        self.sink.publish(
            platform_event(
                plan.sandbox_id,
                "Scheduled",
                "Sandbox accepted by podmand",
                metadata={
                    names.PROGRESS_COMPLETE_STEP: names.STEP_REQUESTING,
                    names.PROGRESS_COMPLETE_LABEL: "Sandbox requested",
                    names.PROGRESS_ACTIVE_STEP: names.STEP_PULLING,
                    names.PROGRESS_ACTIVE_DETAIL: plan.image,
                },
            )
        )
        filtered = filtered_user_env(plan)
        if filtered:
            # Keys only: values may be secrets.
            self.sink.publish(
                platform_event(
                    plan.sandbox_id,
                    "EnvironmentFiltered",
                    f"Not given to the main process (they could steer the root supervisor or the loader; "
                    f"SSH sessions still get them): {', '.join(filtered)}",
                    warning=True,
                )
            )
        pending.task = self.tasks.spawn(self._provision(pending))

    # ------------------------------------------------------------ stop / start before a container

    async def stop_early(self, pending: Pending) -> str:
        """StopSandbox before the container exists: provisioning ends, and stays ended after
        a restart. The ID of a container Podman made after all (never started), or ''."""
        await cancel(pending.task)
        pending.stopped = True
        self.files.mark_stopped(pending.plan.sandbox_id, STOPPED_EARLY)  # a restart must not start it
        self._set(pending, "ContainerStopped", STOPPED_EARLY_MESSAGE)
        container_id = await _finished(pending)
        if container_id:  # that container is the stopped one, and the sandbox is pending no more
            self.files.mark_stopped(pending.plan.sandbox_id, container_id)
            self._pending.pop(pending.plan.sandbox_id, None)
        return container_id

    async def resume_stopped(self, pending: Pending) -> None:
        """StartSandbox of a pending sandbox: provision again unless that already runs."""
        if pending.task is not None and not pending.task.done():
            return
        plan, sandbox_id = pending.plan, pending.plan.sandbox_id
        admission.check_provenance(admission.policy(self.settings), str(plan.driver_config_used).lower())
        await admission.admit_mounts(self.podman, self.settings, str(self.state_dir), plan.workspace, plan.mounts)
        pending.stopped = False  # refused above: still stopped, and still after a restart
        self.files.clear_stopped(sandbox_id)
        self.files.clear_failed(sandbox_id)
        self.files.clear_created(sandbox_id)
        self._set(pending, "Starting", "Resuming provisioning")
        pending.task = self.tasks.spawn(self._provision(pending))

    # ------------------------------------------------------------ provisioning

    def _set(self, pending: Pending, reason: str, message: str, status: str = "False") -> None:
        old = pending.ready
        # transition_time moves only when the condition (status, reason) does, not on each retry.
        when = old.time if (old.status, old.reason) == (status, reason) else snapshots.now()
        pending.ready = Condition(status, reason, message, when)
        self.sink.publish(sandbox_event(pending.snapshot()))

    async def _provision(self, pending: Pending) -> None:
        sandbox_id = pending.plan.sandbox_id
        delay = 0.5
        stale = True  # what podmand remembers (network, image IDs) may be out of date once
        while True:
            try:
                await self._provision_once(pending)
                return
            except ProvisionFailed as exc:
                if exc.reason != "ContainerCreateFailed" or not stale:
                    self._fail(pending, exc.reason, exc.message, terminal=True)
                else:  # e.g. the network or the image was removed while podmand remembered it
                    log.info("sandbox %s: container create failed; trying once more without what podmand "
                             "remembers: %s", sandbox_id, exc.message)
                    stale = False
                    self.networks.forget(pending.plan.workspace)
                    self.images.forget_all()
                    continue
            except PodmanUnavailable as exc:
                log.warning("sandbox %s: Podman unavailable while provisioning, retrying: %s", sandbox_id, exc)
                self._set(pending, "DependenciesNotReady", f"Podman is unavailable; retrying: {exc}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            except (PodmanError, DriverError, OSError) as exc:
                # Reported, but a restart tries again: this may have been a passing fault.
                self._fail(pending, "ProvisioningFailed", str(exc))
            except Exception as exc:  # a bug or an answer podmand cannot read: never a silent, stuck sandbox
                log.error("sandbox %s: unexpected error while provisioning", sandbox_id, exc_info=exc)
                self._fail(pending, "ProvisioningFailed", f"unexpected error: {type(exc).__name__}")
            if pending.plan.rootfs_tar:  # every failure ends with the staged tar deleted
                rootfs.remove_slot(pending.plan.rootfs_tar, self.settings)
            return

    def _fail(self, pending: Pending, reason: str, message: str, *, terminal: bool = False) -> None:
        log.warning("sandbox %s: provisioning failed (%s): %s", pending.plan.sandbox_id, reason, message)
        if terminal:  # reported again, not retried, after a restart
            self.files.mark_failed(pending.plan.sandbox_id, reason, message)
        self._set(pending, reason, message)
        self.sink.publish(platform_event(pending.plan.sandbox_id, reason, message, warning=True))

    async def import_rootfs(self, pending: Pending) -> ImageInspect:
        """Import the staged tar as the sandbox's image, pin its ID, delete the slot.
        While the tar is staged it is imported (moving the tag from any earlier
        import); with the slot gone, an import finished before a restart is used."""
        plan = pending.plan
        info: ImageInspect | None = None
        if not os.path.lexists(plan.rootfs_tar):
            try:
                info = await self.podman.inspect_image(plan.image)
            except PodmanError as exc:
                if exc.status != 404:
                    raise
        if info is None:
            self._set(pending, "Starting", "Importing the rootfs tar")
            try:
                image_id = await rootfs.import_staged(self.podman, plan.rootfs_tar, self.settings, plan.image)
            except InvalidArgument as why:  # gone or changed since the create
                raise ProvisionFailed(ROOTFS_FAILED, why.message) from None
            except PodmanError as why:
                raise ProvisionFailed(ROOTFS_FAILED, f"importing the rootfs tar failed: {why.message}") from None
            info = await self.podman.inspect_image(image_id)
        rootfs.remove_slot(plan.rootfs_tar, self.settings)
        if not info.id:
            raise ProvisionFailed(ROOTFS_FAILED, f"inspecting image {plan.image!r} returned no immutable image ID")
        log.info("sandbox %s: rootfs tar imported as %s (%s)", plan.sandbox_id, plan.image, info.id)
        return info

    async def _provision_once(self, pending: Pending) -> None:
        plan, s = pending.plan, self.settings
        if plan.has_token and not self.files.has_token(plan.sandbox_id):
            raise ProvisionFailed(
                "SandboxTokenMissing", "the sandbox token file is gone from the state directory; delete and recreate"
            )
        pull = self._image
        sup = await pull(s.supervisor_image, supervisor_pull_policy(s.supervisor_image),
                         "SupervisorImageUnavailable", plan.sandbox_id)
        try:
            supervisor_path = await self.supervisor.binary(sup.id)
        except FailedPrecondition as exc:
            raise ProvisionFailed("SupervisorImageUnavailable", exc.message) from exc
        if plan.rootfs_tar:
            image = await self.import_rootfs(pending)
        else:
            self._set(pending, "Starting", f"Pulling image {plan.image}")
            image = await pull(plan.image, s.image_pull_policy, "ImagePullFailed", plan.sandbox_id)
        if why := image_refusal(plan, image):
            raise ProvisionFailed(IMAGE_REFUSED, f"image {plan.image}: {why}")
        mount_images = {}  # driver_config image mounts: pulled with the sandbox's policy, pinned by ID
        for m in plan.mounts:
            if m.kind != "image":
                continue
            mounted = await pull(m.source, s.image_pull_policy, "ImagePullFailed", plan.sandbox_id)
            if why := imagechecks.rootfs_refusal(mounted):
                raise ProvisionFailed(IMAGE_REFUSED, f"image mount {m.source}: {why}")
            mount_images[m.source] = mounted.id
        try:
            workload = await self.validator.resolve_identity(plan, image.id, image.config.user)
        except FailedPrecondition as exc:
            raise ProvisionFailed("WorkloadIdentityInvalid", exc.message) from exc
        try:  # read again for each container: a rotated credential applies from the next one
            self.files.write_proxy(plan.sandbox_id, *proxy.read_files(s))
        except proxy.ProxyFileError as exc:
            raise ProvisionFailed("UpstreamProxyInvalid", str(exc)) from exc
        self.sink.publish(
            platform_event(
                plan.sandbox_id,
                "Pulled",
                f"Image {plan.image} is ready",
                metadata={
                    names.PROGRESS_COMPLETE_STEP: names.STEP_PULLING,
                    names.PROGRESS_COMPLETE_LABEL: f"Image {plan.image} pulled",
                    names.PROGRESS_ACTIVE_STEP: names.STEP_STARTING,
                },
            )
        )
        self._set(pending, "ContainerStarting", "Creating the sandbox container")
        plan = pending.plan = self.validator.assign_gpus(plan)  # a retry keeps the devices
        async with self.networks.lock(plan.workspace):
            network = await self.networks.ensure(plan.workspace)
            prov = Provision(
                image_id=image.id,
                image_user=image.config.user,
                image_env=tuple(image.config.env or ()),
                network=network,
                supervisor_path=str(supervisor_path),
                secrets_dir=str(self.files.dir(plan.sandbox_id)),
                instance=pending.instance,
                identity=workload,
                selinux=await self.relabel(),
                mount_images=mount_images,
            )
            spec = container_spec(plan, s, prov)
            container_id = await self._create_container(pending, spec)
            self.files.mark_created(plan.sandbox_id, container_id)
        try:  # Podman resolves bind sources at the start, maybe long after the create (or a restart) checked them
            await admission.admit_binds(self.podman, s, str(self.state_dir), plan.mounts)
        except FailedPrecondition as exc:
            with contextlib.suppress(PodmanError, PodmanUnavailable):
                await self.podman.remove_container(container_id, 0)
            raise ProvisionFailed("MountRefused", exc.message) from exc
        try:  # an adopted container may run already: Podman answers 304, nothing to do
            await self.podman.start_container(container_id)
        except PodmanError as exc:
            with contextlib.suppress(PodmanError, PodmanUnavailable):
                await self.podman.remove_container(container_id, 0)
            if hostgateway.unresolved(exc.message):
                raise ProvisionFailed(hostgateway.REASON, hostgateway.explanation(exc.message)) from exc
            raise ProvisionFailed(
                "ContainerStartFailed", f"starting the sandbox container failed: {exc.message}"
            ) from exc
        self._pending.pop(plan.sandbox_id, None)
        self.sink.publish(
            platform_event(
                plan.sandbox_id,
                "Started",
                "Sandbox container started",
                metadata={
                    names.PROGRESS_COMPLETE_STEP: names.STEP_STARTING,
                    names.PROGRESS_COMPLETE_LABEL: "Sandbox started",
                },
            )
        )
        self.sink.refresh(container_id, plan.sandbox_id)

    async def _image(self, ref: str, policy: str, reason: str, sandbox_id: str) -> ImageInspect:
        """``ref`` pulled per ``policy`` and pinned. Under 'missing' and 'never' an image
        pinned already costs no call; 'always' and 'newer' pull each time."""
        fetch = lambda: self.puller.pull(ref, policy, reason, sandbox_id)  # noqa: E731
        return await self.images.pinned(ref, fetch, reuse=policy in ("missing", "never"))

    async def _create_container(self, pending: Pending, spec: dict[str, Any]) -> str:
        plan = pending.plan
        # Podman carries out a create it was sent even when podmand stops waiting: the
        # call is shielded and kept on ``pending`` so a delete waits for it (discard).
        call = pending.creating = asyncio.ensure_future(self.podman.create_container(spec))
        try:
            container_id, warnings = await asyncio.shield(call)
        except PodmanError as exc:
            # Whatever the status (Podman 4.3.1 says 500, not 409, for a name in
            # use): our own interrupted attempt, found by its labels, is adopted.
            entry = await find(self.podman, plan.sandbox_id)
            if entry is not None:
                labels = entry.labels or {}
                ours = (labels.get(names.SPEC_HASH), labels.get(names.INSTANCE))
                if ours == (plan.spec_hash, spec["labels"][names.INSTANCE]):
                    log.info("sandbox %s: adopting container %s of an interrupted create", plan.sandbox_id, entry.id)
                    return entry.id
            if entry is not None or exc.status == 409 or "already in use" in exc.message:
                raise ProvisionFailed(
                    "ContainerNameConflict", f"a container named {plan.container_name!r} already exists"
                ) from exc
            raise ProvisionFailed(
                "ContainerCreateFailed", f"creating the sandbox container failed: {exc.message}"
            ) from exc
        for warning in warnings:
            self.sink.publish(platform_event(plan.sandbox_id, "PodmanWarning", warning, warning=True))
        return container_id


async def _finished(pending: Pending) -> str:
    """Wait for the container create Podman was sent for ``pending``, if any (provisioning
    may have been cancelled while Podman carried it out); the ID it made, or ''."""
    call = pending.creating
    if call is None:
        return ""
    await asyncio.wait([call])
    if call.cancelled() or call.exception() is not None:  # retrieved: nobody else will
        return ""
    return call.result()[0]
