"""Checking a create request against Podman before anything is made, and what podmand
reads of an image's own files (once per image ID): the identity the supervisor will
select from its account files, and whether a mount's destination passes through a
symbolic link in it (sandbox/mountlinks.py says why that is refused; each path looked up
is kept, since the caller's mount targets differ from one request to the next)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .._proto import compute_driver_pb2 as pb
from ..config import Settings
from ..errors import FailedPrecondition
from ..host import wsl
from ..libpod import ImageInspect, PodmanClient, PodmanError, versions
from ..pair import documents
from ..sandbox import cdi, identity, imagechecks, mountlinks, rootfs, workspace
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
CACHED_PATHS = 1024  # paths looked up kept per image, the latest (each a few dozen bytes more than its name)
PATH_COST = 64  # what a kept path counts for beside its characters


class ImageFacts(NamedTuple):
    """What podmand has read of an image's own files (a reader each time something more
    is needed)."""

    # /etc/passwd and /etc/group; None until read (a read that finds a link reads no file).
    accounts: tuple[str, str] | None
    # Each path looked up, shallowest components first: what it is in the image
    # (mountlinks.LINK, HERE, FILE or ABSENT).
    paths: dict[str, str]

    @property
    def size(self) -> int:
        return sum(map(len, self.accounts or ())) + sum(len(p) + PATH_COST for p in self.paths)


NOTHING = ImageFacts(None, {})


class Facts:
    """Image ID -> :class:`ImageFacts`, least recently used dropped first, bounded in
    images and in size (the files are the images', chosen by callers, and so are the
    mount targets looked up: at most ``paths`` kept per image, the latest)."""

    def __init__(self, images: int = CACHED_IMAGES, size: int = CACHED_BYTES, paths: int = CACHED_PATHS) -> None:
        self.images, self.size, self.paths = images, size, paths
        self._kept: OrderedDict[str, ImageFacts] = OrderedDict()
        self._size = 0

    def get(self, image_id: str) -> ImageFacts | None:
        facts = self._kept.get(image_id)
        if facts is not None:
            self._kept.move_to_end(image_id)
        return facts

    def put(self, image_id: str, facts: ImageFacts) -> ImageFacts:
        """Keep ``facts`` (its latest :attr:`paths` paths) unless they alone are over the
        size; give them back whole."""
        kept = facts
        if len(facts.paths) > self.paths:
            kept = facts._replace(paths=dict(list(facts.paths.items())[-self.paths:]))
        size = kept.size
        if size > self.size:
            return facts
        if (old := self._kept.pop(image_id, None)) is not None:
            self._size -= old.size
        self._kept[image_id] = kept
        self._size += size
        while len(self._kept) > self.images or self._size > self.size:
            _, dropped = self._kept.popitem(last=False)
            self._size -= dropped.size
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
        present with a WorkingDir of its own or mounts from the caller is read now, unless
        read before, so that a symbolic link in it on a mount's way is refused before
        anything is made; otherwise the image is read while provisioning (what an earlier
        read found is refused here too)."""
        # ValidateSandboxCreate does not require the launch bundle (the gateway mints it after);
        # a create does (contract §1.1, §2.1)
        plan = validate(sandbox, self.settings, podman=await self.features(), recorded=not read)
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
            path, walks = mountlinks.checked_walks(plan.image, image.config.working_dir, image.config.volumes,
                                                   plan.mounts, (plan.ssh_socket_path,))
            facts = self._facts.get(image.id)  # only what was read before, unless ``read`` says
            try:
                if read and (path != workspace.DEFAULT or plan.mounts) and not complete(facts, walks):
                    facts = await self.facts(image.id, walks)
            except FailedPrecondition as exc:
                raise FailedPrecondition(f"{workspace.IMAGE_WHERE}: {plan.image}: {exc.message}") from exc
            if facts is not None:
                mountlinks.check_links(plan.image, image.config.working_dir, walks, facts.paths)
            try:
                if facts is not None and facts.accounts is not None:
                    self._resolve_from(plan, image.id, image.config.user, facts.accounts)
                else:
                    self._check_declaration(plan, image.config.user)
            except FailedPrecondition as exc:
                raise FailedPrecondition(f"{workspace.IMAGE_WHERE}: {plan.image}: {exc.message}") from exc
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

    def _resolve_from(self, plan: Plan, image_id: str, image_user: str, accounts: tuple[str, str]) -> Resolved:
        limit = userns_id_limit(self.settings, plan.userns, self.features.known)
        passwd, group = accounts
        resolved = identity.resolve(
            plan.workload_user, plan.workload_group, image_user, passwd, group, image_id, id_limit=limit
        )
        documents.identity_of(resolved)  # the workload runtime refuses root (contract §5)
        return resolved

    async def facts(self, image_id: str, walks: Sequence[mountlinks.Walk]) -> ImageFacts:
        """What podmand reads of the image's own files, from a never-started container,
        once per image ID while cached: whether each of ``walks`` (mountlinks.walks: every
        mount's destination) passes through a symbolic link in the image (only the paths
        not looked up before are), and unless one does, /etc/passwd and /etc/group.
        FailedPrecondition when an account file is over the limit (imagefiles.py): the
        image's fault."""
        facts = self._facts.get(image_id)
        if complete(facts, walks):
            assert facts is not None
            return facts
        async with self._reads:
            facts = self._facts.get(image_id)  # read meanwhile?
            if complete(facts, walks):
                assert facts is not None
                return facts
            facts = facts or NOTHING
            files = list(ACCOUNT_FILES) if facts.accounts is None else []
            try:
                read = await read_image(self.podman, image_id, files, str(self.state_dir),
                                        walks=[w.path for w in walks], known=facts.paths)
            except TooLarge as exc:
                raise FailedPrecondition(
                    f"{exc.path} of image {image_id} is larger than {exc.limit // 1024} KiB, "
                    "the most podmand reads of an account file"
                ) from None
            accounts = facts.accounts
            if files and not read.link:
                passwd, group = ((read.files.get(p) or b"").decode(errors="replace") for p in ACCOUNT_FILES)
                accounts = (passwd, group)
            return self._facts.put(image_id, ImageFacts(accounts, {**facts.paths, **read.looked}))

    async def resolve_identity(self, plan: Plan, image_id: str, image_user: str, facts: ImageFacts) -> Resolved:
        """The identity the supervisor will select, from the image's own /etc/passwd and
        /etc/group (:meth:`facts`, which found no link on the way of a mount)."""
        await self.features()  # the user namespace's id limit may need them
        assert facts.accounts is not None
        return self._resolve_from(plan, image_id, image_user, facts.accounts)


def complete(facts: ImageFacts | None, walks: Sequence[mountlinks.Walk]) -> bool:
    """Whether ``facts`` answers a create with these ``walks``: a link found on one, or
    none on any and the account files read."""
    if facts is None:
        return False
    if mountlinks.found(walks, facts.paths):
        return True
    return facts.accounts is not None and mountlinks.answered(walks, facts.paths)
