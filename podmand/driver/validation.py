"""Checking a create request against Podman before anything is made, and what podmand
reads of an image's own files (once per image ID): the identity the supervisor will
select from its account files, and whether the workspace's path passes through a
symbolic link in it (sandbox/workspace.py says why that is refused)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import FailedPrecondition
from ..host import wsl
from ..libpod import ImageInspect, PodmanClient, PodmanError, versions
from ..sandbox import cdi, identity, imagechecks, rootfs, workspace
from ..sandbox.identity import Resolved
from ..sandbox.imagefiles import TooLarge, read_image
from ..sandbox.plan import Plan
from ..sandbox.spec import userns_id_limit, validate
from ..security import admission
from .images import Images
from .pending import ProvisionFailed

log = logging.getLogger("podmand.driver")


ACCOUNT_FILES = ("/etc/passwd", "/etc/group")
READS = 4  # image reads at a time: each holds up to two files of imagefiles.ACCOUNT_FILE_LIMIT
CACHED_IMAGES = 256  # images whose files are kept...
CACHED_BYTES = 8 * 1024 * 1024  # ...in at most this many characters together


class ImageFacts(NamedTuple):
    """What podmand reads of an image's own files (one reader each time)."""

    passwd: str
    group: str
    # The first symbolic link on the workspace's path in the image, or "". The path comes
    # from the image's WorkingDir, so it too is the image ID's; with a link, the image is
    # refused and its account files are not read ("").
    link: str


class Facts:
    """Image ID -> :class:`ImageFacts`, least recently used dropped first, bounded in
    images and in size (the files are the images', chosen by callers)."""

    def __init__(self, images: int = CACHED_IMAGES, size: int = CACHED_BYTES) -> None:
        self.images, self.size = images, size
        self._kept: OrderedDict[str, ImageFacts] = OrderedDict()
        self._size = 0

    def get(self, image_id: str) -> ImageFacts | None:
        facts = self._kept.get(image_id)
        if facts is not None:
            self._kept.move_to_end(image_id)
        return facts

    def put(self, image_id: str, facts: ImageFacts) -> ImageFacts:
        """Keep ``facts`` unless they alone are over the size; give them back."""
        size = sum(map(len, facts))
        if size > self.size:
            return facts
        if (old := self._kept.pop(image_id, None)) is not None:
            self._size -= sum(map(len, old))
        self._kept[image_id] = facts
        self._size += size
        while len(self._kept) > self.images or self._size > self.size:
            _, dropped = self._kept.popitem(last=False)
            self._size -= sum(map(len, dropped))
        return facts

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def kept_size(self) -> int:
        return self._size


def image_refusal(plan: Plan, image: ImageInspect) -> str | None:
    """Why the sandbox may not run from ``image`` (imagechecks.py), or None."""
    own = plan.image if plan.rootfs_tar else ""  # its own import: rootfs.reference(sandbox id)
    return imagechecks.rootfs_refusal(image, own) or imagechecks.label_refusal(image)


class Validator:
    """Owns what is read of images' own files, once per image ID (and the GPU inventory,
    and what the connected Podman supports, asked once)."""

    def __init__(self, podman: PodmanClient, settings: Settings, state_dir: Path, images: Images) -> None:
        self.podman = podman
        self.features = versions.Probe(podman)
        self.images = images
        self.settings = settings
        self.state_dir = state_dir
        self.gpus = cdi.GpuSelector(tuple(settings.cdi_spec_dirs), all_by_default=wsl.wsl2())
        self._facts = Facts()
        self._reads = asyncio.Semaphore(READS)

    async def validate(self, sandbox: pb.DriverSandbox | None, *, staged: bool = True, read: bool = False) -> Plan:
        """``staged=False``: leave the staged rootfs tar unchecked (create checks it
        after the identical-retry check: the first create may have imported it).
        ``read`` (a create, not ValidateSandboxCreate, which makes no container): an image
        present with a WorkingDir of its own is read now, unless read before, so that a
        symbolic link on its path is refused before anything is made (the default
        ``/sandbox`` is looked at when the image is read anyway, while provisioning)."""
        plan = validate(sandbox, self.settings, podman=await self.features())
        if plan.gpu_count:  # peek: only a create takes devices
            self.gpus.peek(plan.gpu_count)
        await admission.admit_mounts(self.podman, self.settings, str(self.state_dir), plan.workspace, plan.mounts)
        if self.settings.image_pull_policy == "never":
            await self._check_mount_images(plan)
        if plan.rootfs_tar:
            if staged:
                self.check_rootfs(plan)
            return plan
        try:
            image = await self._inspect(plan.image)
        except PodmanError as exc:
            if exc.status != 404:
                raise
            if self.settings.image_pull_policy == "never":
                raise FailedPrecondition(
                    f"sandbox.spec.template.image: image {plan.image!r} is not present and the pull policy is 'never'"
                ) from exc
        else:  # present already: what the image declares can be checked before anything is made
            if why := image_refusal(plan, image):
                raise FailedPrecondition(f"sandbox.spec.template.image: {plan.image}: {why}")
            path = workspace.root(plan.image, image.config.working_dir, (plan.ssh_socket_path,), plan.mounts)
            facts = self._facts.get(image.id)  # only files read before, unless ``read`` says
            try:
                if facts is None and read and path != workspace.DEFAULT:
                    facts = await self.facts(image.id, path)
                if facts is not None and not facts.link:
                    self._resolve_from(plan, image.id, image.config.user, facts)
                elif facts is None:
                    self._check_declaration(plan, image.config.user)
            except FailedPrecondition as exc:
                raise FailedPrecondition(f"{workspace.IMAGE_WHERE}: {plan.image}: {exc.message}") from exc
            if facts is not None and facts.link:
                raise workspace.link_refusal(plan.image, image.config.working_dir, path, facts.link)
        return plan

    def check_rootfs(self, plan: Plan) -> None:
        """The staged tar as it is now, and the identity: a rootfs tar declares no USER."""
        rootfs.check_staged(plan.rootfs_tar, self.settings)
        try:
            self._check_declaration(plan, "")
        except FailedPrecondition as exc:
            raise FailedPrecondition(f"{rootfs.WHERE}: a rootfs tar declares no USER: {exc.message}") from exc

    def _check_declaration(self, plan: Plan, image_user: str) -> None:
        """What the supervisor would refuse of the image's ``USER`` and the policy's identity,
        before the image's account files are read."""
        limit = userns_id_limit(self.settings, plan.userns, self.features.known)
        identity.check_declaration(plan.workload_user, plan.workload_group, image_user, id_limit=limit)

    async def _check_mount_images(self, plan: Plan) -> None:
        """Under pull policy 'never', each image mount's image must be here already."""
        for i, m in enumerate(plan.mounts):
            if m.kind != "image":
                continue
            where = f"sandbox.spec.template.driver_config.mounts[{i}].source"
            try:
                image = await self._inspect(m.source)
            except PodmanError as exc:
                if exc.status != 404:
                    raise
                raise FailedPrecondition(
                    f"{where}: image {m.source!r} is not present and the pull policy is 'never'"
                ) from exc
            if why := imagechecks.rootfs_refusal(image):
                raise FailedPrecondition(f"{where}: {why}")

    async def _inspect(self, ref: str) -> ImageInspect:
        """The image ``ref`` names, as known or inspected (PodmanError 404: not present)."""
        return await self.images.pinned(ref, lambda: self.podman.inspect_image(ref))

    def assign_gpus(self, plan: Plan) -> Plan:
        """Take ``gpu_count`` devices from the CDI inventory as it is now (round-robin); the
        plan that comes back names them and asks for no more."""
        if not plan.gpu_count:
            return plan
        try:
            devices = self.gpus.take(plan.gpu_count)
        except FailedPrecondition as exc:
            raise ProvisionFailed("GpuUnavailable", exc.message) from exc
        log.info("sandbox %s: assigned GPU(s) %s", plan.sandbox_id, ", ".join(devices))
        return dataclasses.replace(plan, cdi_devices=tuple(devices), gpu_count=0)

    def _resolve_from(self, plan: Plan, image_id: str, image_user: str, facts: ImageFacts) -> Resolved:
        limit = userns_id_limit(self.settings, plan.userns, self.features.known)
        return identity.resolve(
            plan.workload_user, plan.workload_group, image_user, facts.passwd, facts.group, image_id, id_limit=limit
        )

    async def facts(self, image_id: str, path: str) -> ImageFacts:
        """What podmand reads of the image's own files, from a never-started container, once
        per image ID while cached: whether the workspace's ``path`` (workspace.root's, from
        the image's WorkingDir) passes through a symbolic link in the image, and unless it
        does, /etc/passwd and /etc/group. FailedPrecondition when an account file is over
        the limit (imagefiles.py): the image's fault."""
        facts = self._facts.get(image_id)
        if facts is not None:
            return facts
        async with self._reads:
            if (facts := self._facts.get(image_id)) is not None:  # read meanwhile
                return facts
            try:
                read = await read_image(self.podman, image_id, list(ACCOUNT_FILES), str(self.state_dir),
                                        links=workspace.ancestors(path))
            except TooLarge as exc:
                raise FailedPrecondition(
                    f"{exc.path} of image {image_id} is larger than {exc.limit // 1024} KiB, "
                    "the most podmand reads of an account file"
                ) from None
        passwd, group = ((read.files.get(p) or b"").decode(errors="replace") for p in ACCOUNT_FILES)
        return self._facts.put(image_id, ImageFacts(passwd, group, read.link))

    async def resolve_identity(self, plan: Plan, image_id: str, image_user: str, facts: ImageFacts) -> Resolved:
        """The identity the supervisor will select, from the image's own /etc/passwd and
        /etc/group (:meth:`facts`)."""
        await self.features()  # the user namespace's id limit may need them
        return self._resolve_from(plan, image_id, image_user, facts)
