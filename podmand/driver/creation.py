"""The sandbox's container: made from what preparation found, its binds admitted again,
started, and removed again when it cannot start. Its own module because the create call
outlives whoever waits for it, and what follows from that is kept here.

Podman carries out a create it was sent even when podmand stops waiting, so the call is
kept on the pending sandbox (a delete or a stop waits for it: :func:`finished`), and an
interrupted create of podmand's own is adopted by its labels, never made twice. The
container is made under its workspace network's lock, so that the network cannot be
removed as unused meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from .. import names
from ..errors import DriverError, FailedPrecondition
from ..host import hostgateway
from ..libpod import PodmanClient, PodmanError, PodmanUnavailable
from ..sandbox import selinux
from ..sandbox.plan import Plan, Provision
from ..sandbox.spec import container_spec
from ..sandbox.supervisor import SupervisorCache
from ..security import admission
from .context import Context
from .events import platform_event
from .lookup import find
from .networks import Networks
from .pending import Pending, ProvisionFailed
from .preparation import Prepared
from .validation import Validator

log = logging.getLogger("podmand.driver")


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


class Creation:
    def __init__(self, ctx: Context, networks: Networks, validator: Validator, supervisor: SupervisorCache) -> None:
        self.ctx = ctx
        self.networks = networks
        self.validator = validator
        self.supervisor = supervisor
        self.relabel = Relabel(ctx.podman, ctx.settings.selinux)

    async def create(self, pending: Pending, prepared: Prepared) -> str:
        """The sandbox's container, made (or adopted) and recorded as created; its ID."""
        plan = pending.plan = self.validator.assign_gpus(pending.plan)  # a retry keeps the devices
        image = prepared.image
        async with self.networks.lock(plan.workspace):
            network = await self.networks.ensure(plan.workspace)
            prov = Provision(
                image_id=image.id,
                image_user=image.config.user,
                image_env=tuple(image.config.env or ()),
                network=network,
                supervisor_path=str(prepared.supervisor_path),
                secrets_dir=str(self.ctx.files.dir(plan.sandbox_id)),
                instance=pending.instance,
                identity=prepared.identity,
                selinux=await self.relabel(),
                mount_images=prepared.mount_images,
                workspace=prepared.workspace,
            )
            spec = container_spec(plan, self.ctx.settings, prov)
            container_id = await self._create_container(pending, spec)
            try:
                self.ctx.files.mark_created(plan.sandbox_id, container_id)
            except DriverError:  # the state directory: no container without its record
                with contextlib.suppress(PodmanError, PodmanUnavailable):
                    await self.ctx.podman.remove_container(container_id, 0)
                raise
        return container_id

    async def start(self, plan: Plan, container_id: str, supervisor_path: str) -> None:
        """Start the container made for ``plan``, which binds the supervisor binary at
        ``supervisor_path``; one that is refused or fails to start is removed."""
        try:  # Podman resolves bind sources at the start, maybe long after the create (or a restart) checked them
            await admission.admit_binds(self.ctx.podman, self.ctx.settings, str(self.ctx.state_dir), plan.mounts)
        except FailedPrecondition as exc:
            raise await self._discard(container_id, "MountRefused", exc.message) from exc
        try:  # the binary every sandbox runs as root, unchanged (supervisor.py)
            await self.supervisor.check(supervisor_path)
        except FailedPrecondition as exc:
            raise await self._discard(container_id, "SupervisorImageUnavailable", exc.message) from exc
        try:  # an adopted container may run already: Podman answers 304, nothing to do
            await self.ctx.podman.start_container(container_id)
        except PodmanError as exc:
            if hostgateway.unresolved(exc.message):
                raise await self._discard(container_id, hostgateway.REASON, hostgateway.explanation(exc.message)) \
                    from exc
            raise await self._discard(container_id, "ContainerStartFailed",
                                      f"starting the sandbox container failed: {exc.message}") from exc

    async def _discard(self, container_id: str, reason: str, message: str) -> ProvisionFailed:
        """Remove the container that is not to run (a failure to do so is the next GC's); the
        failure to report."""
        with contextlib.suppress(PodmanError, PodmanUnavailable):
            await self.ctx.podman.remove_container(container_id, 0)
        return ProvisionFailed(reason, message)

    async def _create_container(self, pending: Pending, spec: dict[str, Any]) -> str:
        plan = pending.plan
        # Podman carries out a create it was sent even when podmand stops waiting: the
        # call is shielded and kept on ``pending`` so a delete waits for it (discard).
        call = pending.creating = asyncio.ensure_future(self.ctx.podman.create_container(spec))
        try:
            container_id, warnings = await asyncio.shield(call)
        except PodmanError as exc:
            # Whatever the status (Podman 4.3.1 says 500, not 409, for a name in
            # use): our own interrupted attempt, found by its labels, is adopted.
            entry = await find(self.ctx.podman, plan.sandbox_id)
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
            self.ctx.sink.publish(platform_event(plan.sandbox_id, "PodmanWarning", warning, warning=True))
        return container_id


async def finished(pending: Pending) -> str:
    """Wait for the container create Podman was sent for ``pending``, if any (provisioning
    may have been cancelled while Podman carried it out); the ID it made, or ''."""
    call = pending.creating
    if call is None:
        return ""
    await asyncio.wait([call])
    if call.cancelled() or call.exception() is not None:  # retrieved: nobody else will
        return ""
    return call.result()[0]
