"""Removing podmand-owned leftovers of sandboxes that no longer exist.

Never touches anything podmand does not own (networks need both podmand's
owner label and a workspace label).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from .. import names
from ..config import Settings
from ..libpod import ContainerListEntry, PodmanClient, PodmanError
from ..locks import LockTable
from ..sandbox import imagefiles, rootfs, snapshots
from ..sandbox.files import SandboxFiles
from ..sandbox.imagefiles import READER_PREFIX
from . import lookup
from .networks import Networks

log = logging.getLogger("podmand.driver")


async def remove_rootfs_image(podman: PodmanClient, ref: str) -> bool:
    """Remove a sandbox's imported rootfs once its container is gone; one still in use
    (another sandbox mounts it) stays until garbage collection finds it unused."""
    if rootfs.sandbox_of(ref) is None:
        return False
    try:
        return await podman.remove_image(ref)
    except PodmanError as exc:
        log.info("keeping rootfs image %s for now: %s", ref, exc.message)
        return False


async def remove_stale_readers(
    podman: PodmanClient, state_dir: Path, owned: list[ContainerListEntry] | None = None
) -> list[str]:
    """Image readers of this state directory not in use: left by a predecessor
    killed mid-read, or by a removal Podman did not answer (one podmand per
    state directory, so nobody else's).  ``owned``: every podmand-owned container,
    when a list of them was just made (a list costs Podman 4.3.1 a runtime query per
    running container)."""
    removed = []
    if owned is None:
        owned = await podman.list_containers([f"{names.OWNER}={names.OWNER_VALUE}", f"{names.STATE_DIR}={state_dir}"],
                                             name=f"^{READER_PREFIX}")
    for entry in owned:
        if (entry.labels or {}).get(names.STATE_DIR) != str(state_dir):
            continue
        name = (entry.names or [""])[0]
        stale = name.startswith(READER_PREFIX) and name not in imagefiles.ACTIVE
        if not stale:
            continue
        try:
            if await podman.remove_container(entry.id, 0):
                removed.append(f"container:{name}")
        except PodmanError as exc:  # tried again at the next collection
            log.warning("image reader %s not removed: %s", name, exc.message)
    return removed


@dataclass(frozen=True)
class Collector:
    """``pending`` (id -> workspace) and ``deleting`` name sandboxes that exist
    without a container, or are on their way out: theirs is never garbage."""

    podman: PodmanClient
    settings: Settings
    state_dir: Path
    files: SandboxFiles
    locks: LockTable
    networks: Networks
    pending: Callable[[], Mapping[str, str]]
    deleting: Callable[[], AbstractSet[str]]

    async def collect(self) -> list[str]:
        """Remove leftovers older than the grace period: token directories, workspace
        networks, rootfs images and image reader containers; what was removed."""
        removed: list[str] = []
        cutoff = time.time() - self.settings.gc_grace
        owned = await self.podman.list_containers([f"{names.OWNER}={names.OWNER_VALUE}"])  # the one list of a pass
        entries = [e for e in owned if names.sandbox_of((e.names or [""])[0], e.labels or {})]
        live = {(e.labels or {}).get(names.SANDBOX_ID) for e in entries} | set(self.pending()) | set(self.deleting())
        volumes = {
            (v.labels or {}).get(names.SANDBOX_ID)
            for v in await self.podman.list_volumes([f"{names.OWNER}={names.OWNER_VALUE}"])
        }
        for sandbox_id in self.files.sandbox_ids():
            try:
                recent = self.files.dir(sandbox_id).stat().st_mtime > cutoff
            except FileNotFoundError:
                continue  # deleted meanwhile
            if sandbox_id in live or sandbox_id in volumes or recent:
                continue
            async with self.locks[sandbox_id]:
                if sandbox_id not in self.pending() and await lookup.find(self.podman, sandbox_id) is None:
                    self.files.remove(sandbox_id)
                    removed.append(f"files:{sandbox_id}")
        workspaces = {(e.labels or {}).get(names.SANDBOX_WORKSPACE) or "" for e in entries}
        workspaces |= set(self.pending().values())
        in_use = {self.networks.name(w) for w in workspaces}
        for network in await self.podman.list_networks([f"{names.OWNER}={names.OWNER_VALUE}"]):
            labels = network.labels or {}
            if names.SANDBOX_WORKSPACE not in labels or network.name in in_use:
                continue
            created = snapshots.time_of(network.created)
            if created is None or created.seconds > cutoff:
                continue
            if await self.networks.remove_unused(labels[names.SANDBOX_WORKSPACE], network.name):
                removed.append(f"network:{network.name}")
        for ref in await self.podman.image_names(rootfs.REPOSITORY):  # rootfs imports of sandboxes now gone
            if rootfs.sandbox_of(ref) not in live | volumes and await remove_rootfs_image(self.podman, ref):
                removed.append(f"image:{ref}")
        removed += await remove_stale_readers(self.podman, self.state_dir, owned)
        # Readers of other state directories (or older podmands) live for well under
        # a second: one older than a minute was orphaned by a podmand killed mid-read.
        # (Older than both the grace and a minute: a grace of 0 must not take a live read.)
        extractor_cutoff = min(cutoff, time.time() - 60)
        for extractor in owned:
            name = (extractor.names or [""])[0]
            if f"container:{name}" in removed:
                continue
            created = snapshots.time_of(extractor.created)
            old = created is not None and created.seconds < extractor_cutoff
            reader = name.startswith(READER_PREFIX) and name not in imagefiles.ACTIVE
            if reader and old and await self.podman.remove_container(extractor.id, 0):
                removed.append(f"container:{name}")
        if removed:
            log.info("garbage collected %s", ", ".join(removed))
        return removed
