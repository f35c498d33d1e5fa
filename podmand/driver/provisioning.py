"""Creates from recorded request to running container, in the background.

Once records.py has recorded a create, pulling, importing, creating and
starting continue in a task and are reported on the watch stream.  Until its
container exists a sandbox is :class:`~podmand.driver.pending.Pending`, owned
here: the provisioner keeps the pending table, runs each create's task (its
retries, and the failures it reports), and stops or resumes it on request. The
work itself is preparation.py's (the images and what comes from them) and
pairs.py's (the sandbox's two containers).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from .. import names, tracing
from .._proto import compute_driver_pb2 as pb
from ..errors import DriverError
from ..libpod import PodmanError, PodmanUnavailable
from ..locks import LockTable
from ..sandbox import rootfs, snapshots
from ..sandbox.plan import Plan
from ..sandbox.snapshots import Condition
from ..security import admission
from .context import Context
from .creation import Relabel, finished
from .events import platform_event, sandbox_event
from .index import Index
from .pairs import Pairs
from .pending import STOPPED_EARLY, STOPPED_EARLY_MESSAGE, Pending, ProvisionFailed
from .preparation import Preparation
from .tasks import Tasks, cancel
from .validation import Validator

log = logging.getLogger("podmand.driver")


class Provisioner:
    """Owns the pending sandboxes; everything else it uses is given."""

    def __init__(
        self,
        ctx: Context,
        tasks: Tasks,
        locks: LockTable,
        validator: Validator,
        index: Index,
    ) -> None:
        self.ctx = ctx
        self.tasks = tasks
        self.locks = locks
        self.validator = validator
        self.index = index  # the hub's sandbox -> containers (read only here)
        self.preparation = Preparation(ctx, validator, say=self._set)
        self.relabel = Relabel(ctx.podman, ctx.settings.selinux)
        self.pairs = Pairs(ctx, self.preparation.supervisor)
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
            await finished(pending)  # the delete then finds the container Podman made
            if pending.plan.rootfs_tar:
                rootfs.remove_slot(pending.plan.rootfs_tar, self.ctx.settings)
        return pending

    def runtime_identity(self, sandbox_id: str, instance: str) -> str:
        return names.runtime_identity(instance, self.ctx.files.generation(sandbox_id) or "0")

    def start(self, plan: Plan, instance: str) -> None:
        """Make ``plan`` pending, announce it, and provision it in the background."""
        ready = Condition("False", "Starting", f"Sandbox accepted; preparing image {plan.image}", snapshots.now())
        pending = Pending(plan, instance, ready)
        self._pending[plan.sandbox_id] = pending
        self.ctx.sink.publish(sandbox_event(pending.snapshot()))
        self.ctx.sink.publish(
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
        pending.task = self.tasks.spawn(self._provision(pending))

    # ------------------------------------------------------------ stop / start before a container

    async def stop_early(self, pending: Pending) -> str:
        """StopSandbox before the container exists: provisioning ends, and stays ended after
        a restart. The ID of a container Podman made after all (never started), or ''."""
        await cancel(pending.task)
        pending.stopped = True
        self.ctx.files.mark_stopped(pending.plan.sandbox_id, STOPPED_EARLY)  # a restart must not start it
        self._set(pending, "ContainerStopped", STOPPED_EARLY_MESSAGE)
        container_id = await finished(pending)
        if container_id:  # that container is the stopped one, and the sandbox is pending no more
            self.ctx.files.mark_stopped(pending.plan.sandbox_id, container_id)
            self._pending.pop(pending.plan.sandbox_id, None)
        return container_id

    async def resume_stopped(self, pending: Pending) -> None:
        """StartSandbox of a pending sandbox: provision again unless that already runs."""
        if pending.task is not None and not pending.task.done():
            return
        plan, sandbox_id, ctx = pending.plan, pending.plan.sandbox_id, self.ctx
        admission.check_provenance(admission.policy(ctx.settings), str(plan.driver_config_used).lower())
        await admission.admit_mounts(ctx.podman, ctx.settings, str(ctx.state_dir), plan.workspace, plan.mounts)
        pending.stopped = False  # refused above: still stopped, and still after a restart
        ctx.files.clear_stopped(sandbox_id)
        ctx.files.clear_failed(sandbox_id)
        ctx.files.clear_created(sandbox_id)
        self._set(pending, "Starting", "Resuming provisioning")
        pending.task = self.tasks.spawn(self._provision(pending))

    # ------------------------------------------------------------ provisioning

    def _set(self, pending: Pending, reason: str, message: str, status: str = "False") -> None:
        old = pending.ready
        # transition_time moves only when the condition (status, reason) does, not on each retry.
        when = old.time if (old.status, old.reason) == (status, reason) else snapshots.now()
        pending.ready = Condition(status, reason, message, when)
        self.ctx.sink.publish(sandbox_event(pending.snapshot()))

    async def _provision(self, pending: Pending) -> None:
        """Provision until done, failed or cancelled: one span, a child of the create's or
        start's RPC span (the task inherits its context)."""
        with tracing.span("podman.provision", {"sandbox.id": pending.plan.sandbox_id}):
            await self._provision_retrying(pending)

    async def _provision_retrying(self, pending: Pending) -> None:
        sandbox_id = pending.plan.sandbox_id
        delay = 0.5
        stale = True  # what podmand remembers (image IDs) may be out of date once
        while True:
            try:
                await self._provision_once(pending)
                return
            except ProvisionFailed as exc:
                if exc.reason != "ContainerCreateFailed" or not stale:
                    self._fail(pending, exc.reason, exc.message, terminal=True)
                else:  # e.g. the image was removed while podmand remembered it
                    log.info("sandbox %s: container create failed; trying once more without what podmand "
                             "remembers: %s", sandbox_id, exc.message)
                    stale = False
                    self.validator.images.forget_all()
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
                rootfs.remove_slot(pending.plan.rootfs_tar, self.ctx.settings)
            return

    def _fail(self, pending: Pending, reason: str, message: str, *, terminal: bool = False) -> None:
        log.warning("sandbox %s: provisioning failed (%s): %s", pending.plan.sandbox_id, reason, message)
        tracing.current_failed(reason)
        if terminal:  # reported again, not retried, after a restart
            try:
                self.ctx.files.mark_failed(pending.plan.sandbox_id, reason, message)
                # no pair is made of this bundle now: its tokens leave the state directory
                # (a StartSandbox brings a fresh one: startstop.py)
                self.ctx.files.drop_launch(pending.plan.sandbox_id)
            except DriverError as exc:  # the state directory: reported now, retried after a restart
                log.warning("sandbox %s: the failure is not recorded: %s", pending.plan.sandbox_id, exc.message)
        self._set(pending, reason, message)
        self.ctx.sink.publish(platform_event(pending.plan.sandbox_id, reason, message, warning=True))

    async def _provision_once(self, pending: Pending) -> None:
        plan = pending.plan
        prepared = await self.preparation.prepare(pending)
        self._set(pending, "ContainerStarting", "Creating the sandbox container")
        step = {"sandbox.id": plan.sandbox_id}
        plan = pending.plan = self.validator.assign_gpus(plan)  # a retry keeps the devices
        with tracing.span("podman.create_pair", step):
            container_id = await self.pairs.create(pending, prepared, await self.relabel())
        self._pending.pop(plan.sandbox_id, None)
        self.ctx.sink.publish(
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
        # The one look at the started container: Podman's events of this create and start
        # (create, init, start) happened before it and cost no look of their own (hub.py).
        self.ctx.sink.refresh(container_id, plan.sandbox_id, started=True)
