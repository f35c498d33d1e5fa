"""A create's image work: the supervisor image and its binary, the sandbox's image (pulled,
or imported from a staged rootfs tar), its image mounts, and what podmand reads from them.
Its own module because it is all Podman's image store, done again on every attempt from
what podmand remembers, while making the container (creation.py) needs only its result.

Each image is pinned by ID (images.py) and refused when it is unfit, a mount destination
through a symbolic link in it included (a caller's mount target: MountRefused); the
identity the supervisor will select comes from the image's own accounts; the upstream
proxy files are written again for each container. Every failure is reported with a
reason of its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import names, tracing
from ..errors import FailedPrecondition, InvalidArgument
from ..libpod import ImageInspect, PodmanError
from ..sandbox import imagechecks, mountlinks, proxy, rootfs, usernamespace
from ..sandbox.identity import Resolved
from ..sandbox.supervisor import SupervisorCache
from .context import Context
from .events import platform_event
from .pending import Pending, ProvisionFailed
from .pulls import Puller, supervisor_pull_policy
from .validation import Validator, image_refusal

log = logging.getLogger("podmand.driver")

ROOTFS_FAILED = "RootfsImportFailed"
IMAGE_REFUSED = "ImageRefused"  # terminal: the image itself is what is wrong (imagechecks.py)
RUNTIME_UNAVAILABLE = "RuntimeImageUnavailable"  # split: no openshell-sandbox from the runtime image
RESERVED_HIERARCHY = names.CHANNEL_DIR.rsplit("/", 1)[0]  # /.openshell: the pair's, never the image's
MOUNT_REFUSED = "MountRefused"  # terminal: a caller's mount cannot be made safely (here: through a link in the image)


@dataclass(frozen=True)
class Prepared:
    """What the container is made from."""

    image: ImageInspect
    supervisor_path: Path
    mount_images: dict[str, str]  # image mount reference -> pinned image ID
    identity: Resolved
    workspace: str  # the workspace volume's path, from the image's WorkingDir
    supervisor_image_id: str = ""  # the supervisor container's image, pinned


class Preparation:
    def __init__(self, ctx: Context, validator: Validator, say: Callable[[Pending, str, str], None]) -> None:
        self.ctx = ctx
        self.validator = validator
        self.say = say  # sets the pending sandbox's Ready condition (reason, message) and publishes it
        self.puller = Puller(ctx.podman, ctx.settings, ctx.sink)
        self.images = validator.images
        self.supervisor = SupervisorCache(ctx.podman, ctx.state_dir)

    async def prepare(self, pending: Pending) -> Prepared:
        """Everything but the container, ending with the Pulled event; ProvisionFailed
        with the reason the sandbox is reported with."""
        plan, s = pending.plan, self.ctx.settings
        pull = self._image
        sup = await pull(s.supervisor_image, supervisor_pull_policy(s.supervisor_image),
                         "SupervisorImageUnavailable", plan.sandbox_id)
        # The binary bound into the workload: the runtime image's openshell-sandbox (the
        # supervisor image runs as a container of its own).
        runtime = await pull(s.sandbox_runtime_image, supervisor_pull_policy(s.sandbox_runtime_image),
                             RUNTIME_UNAVAILABLE, plan.sandbox_id)
        # A sandbox whose root is podmand's uid gets a copy of its own (supervisor.py).
        own = self.ctx.files.dir(plan.sandbox_id) if usernamespace.maps_own_uid(plan.userns, s) else None
        try:
            supervisor_path = await self.supervisor.binary(runtime.id, own)
        except FailedPrecondition as exc:
            raise ProvisionFailed(RUNTIME_UNAVAILABLE, exc.message) from exc
        if plan.rootfs_tar:
            image = await self.import_rootfs(pending)
        else:
            self.say(pending, "Starting", f"Pulling image {plan.image}")
            image = await pull(plan.image, s.image_pull_policy, "ImagePullFailed", plan.sandbox_id)
        if why := image_refusal(plan, image):
            raise ProvisionFailed(IMAGE_REFUSED, f"image {plan.image}: {why}")
        try:  # the workspace and every mount's destination
            workdir, walks = mountlinks.checked_walks(plan.image, image.config.working_dir, image.config.volumes,
                                                      plan.mounts, (plan.ssh_socket_path,))
        except mountlinks.Refused as exc:
            raise ProvisionFailed(MOUNT_REFUSED if exc.caller else IMAGE_REFUSED, exc.message) from exc
        mount_images = {}  # driver_config image mounts: pulled with the sandbox's policy, pinned by ID
        for m in plan.mounts:
            if m.kind != "image":
                continue
            mounted = await pull(m.source, s.image_pull_policy, "ImagePullFailed", plan.sandbox_id)
            if why := imagechecks.rootfs_refusal(mounted):
                raise ProvisionFailed(IMAGE_REFUSED, f"image mount {m.source}: {why}")
            mount_images[m.source] = mounted.id
        try:
            facts = await self.validator.facts(image.id, walks)  # the image's own files, once per image ID
        except FailedPrecondition as exc:
            raise ProvisionFailed("WorkloadIdentityInvalid", exc.message) from exc
        try:  # a destination passes through a symbolic link in the image
            mountlinks.check_links(plan.image, image.config.working_dir, walks, facts.paths)
        except mountlinks.Refused as exc:
            raise ProvisionFailed(MOUNT_REFUSED if exc.caller else IMAGE_REFUSED, exc.message) from exc
        if facts.paths.get(RESERVED_HIERARCHY, mountlinks.ABSENT) != mountlinks.ABSENT:
            raise ProvisionFailed(IMAGE_REFUSED, f"image {plan.image}: a workload image must not ship "
                                  f"{RESERVED_HIERARCHY} (the Sandbox Protocol's reserved hierarchy)")
        try:
            workload = await self.validator.resolve_identity(plan, image.id, image.config.user, facts)
        except FailedPrecondition as exc:
            raise ProvisionFailed("WorkloadIdentityInvalid", exc.message) from exc
        try:  # read again for each container: a rotated credential applies from the next one
            self.ctx.files.write_proxy(plan.sandbox_id, *proxy.read_files(s))
        except proxy.ProxyFileError as exc:
            raise ProvisionFailed("UpstreamProxyInvalid", str(exc)) from exc
        self.ctx.sink.publish(
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
        return Prepared(image, supervisor_path, mount_images, workload, workdir, sup.id)

    async def import_rootfs(self, pending: Pending) -> ImageInspect:
        """Import the staged tar as the sandbox's image, pin its ID, delete the slot.
        While the tar is staged it is imported (moving the tag from any earlier
        import); with the slot gone, an import finished before a restart is used."""
        plan = pending.plan
        info: ImageInspect | None = None
        if not os.path.lexists(plan.rootfs_tar):
            try:
                info = await self.ctx.podman.inspect_image(plan.image)
            except PodmanError as exc:
                if exc.status != 404:
                    raise
        if info is None:
            self.say(pending, "Starting", "Importing the rootfs tar")
            try:
                image_id = await rootfs.import_staged(self.ctx.podman, plan.rootfs_tar, self.ctx.settings, plan.image)
            except InvalidArgument as why:  # gone or changed since the create
                raise ProvisionFailed(ROOTFS_FAILED, why.message) from None
            except PodmanError as why:
                raise ProvisionFailed(ROOTFS_FAILED, f"importing the rootfs tar failed: {why.message}") from None
            info = await self.ctx.podman.inspect_image(image_id)
        rootfs.remove_slot(plan.rootfs_tar, self.ctx.settings)
        if not info.id:
            raise ProvisionFailed(ROOTFS_FAILED, f"inspecting image {plan.image!r} returned no immutable image ID")
        log.info("sandbox %s: rootfs tar imported as %s (%s)", plan.sandbox_id, plan.image, info.id)
        return info

    async def _image(self, ref: str, policy: str, reason: str, sandbox_id: str) -> ImageInspect:
        """``ref`` pulled per ``policy`` and pinned. Under 'missing' and 'never' an image
        pinned already costs no call; 'always' and 'newer' pull each time."""
        async def fetch() -> ImageInspect:
            with tracing.span("podman.pull", {"sandbox.id": sandbox_id, "container.image.name": ref,
                                              "podman.pull_policy": policy}):
                if policy == "never":
                    return await self.puller.pull(ref, policy, reason, sandbox_id)
                with self.images.own_pull(ref):  # its pull event is not to forget the pin
                    return await self.puller.pull(ref, policy, reason, sandbox_id)

        return await self.images.pinned(ref, fetch, reuse=policy in ("missing", "never"))
