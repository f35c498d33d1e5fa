"""Removing a sandbox and everything podmand made for it, on DeleteSandbox or once it is found
gone out of band. Its own module because both ways must agree on every step, and on who
says Deleted: the RPC, or the hub when nobody asked.

Both end the same: the pending create discarded, the containers, the workspace volume
(with its rootfs image) and the state files removed, and the workspace network with
its last member. The sandboxes a DeleteSandbox is removing are kept here too: the
hub's clean-up and garbage collection leave them alone meanwhile.
"""

from __future__ import annotations

from functools import partial

from .. import names
from ..locks import LockTable
from . import lookup
from .context import Context
from .events import deleted_event
from .garbage import remove_rootfs_image
from .index import Index
from .networks import Networks
from .observer import Observer
from .provisioning import Provisioner
from .teardown import retried


class Removal:
    def __init__(
        self,
        ctx: Context,
        locks: LockTable,
        index: Index,
        networks: Networks,
        observer: Observer,
        provisioning: Provisioner,
    ) -> None:
        self.ctx = ctx
        self.locks = locks
        self.index = index
        self.networks = networks
        self.observer = observer
        self.provisioning = provisioning
        self.deleting: set[str] = set()  # sandboxes a DeleteSandbox is removing

    async def delete(self, sandbox_id: str) -> bool:
        """DeleteSandbox: True when there was something to remove (and Deleted was sent)."""
        self.deleting.add(sandbox_id)
        try:
            async with self.locks[sandbox_id]:
                existed, workspace = await self._remove_everything(sandbox_id)
        finally:
            self.deleting.discard(sandbox_id)
        if existed:
            self.ctx.sink.publish(deleted_event(sandbox_id))
        if workspace is not None:
            await self.networks.remove_unused(workspace)
        return existed

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
        if sandbox_id in self.deleting or self.provisioning.get(sandbox_id) is not None:
            return False
        if container_id and known is None and self.index.ready:
            return False
        async with self.locks[sandbox_id]:
            found = await lookup.find_indexed(self.ctx.podman, self.index, sandbox_id)
            if found is not None or self.provisioning.get(sandbox_id) is not None:
                return False
            record = await self.ctx.podman.inspect_volume(names.volume_name(sandbox_id))
            owner = (record.labels or {}).get(names.STATE_DIR, "") if record is not None else ""
            if owner and owner != str(self.ctx.state_dir):
                return True  # another podmand's, sharing this Podman: gone from the streams, its to clean up
            existed, workspace = await self._remove_everything(sandbox_id)
        if workspace is not None:
            await self.networks.remove_unused(workspace)
        # It existed if podmand knew the container or had told of the sandbox (a resync),
        # or found something of it now; else a DeleteSandbox got there first.
        return existed or known is not None or not container_id

    async def _remove_everything(self, sandbox_id: str) -> tuple[bool, str | None]:
        existed = False
        workspace: str | None = None
        pending = await self.provisioning.discard(sandbox_id)
        if pending is not None:
            existed, workspace = True, pending.plan.workspace
        pairs = self.provisioning.pairs
        # the supervisor first (contract §4.4)
        await retried(sandbox_id, "removing", partial(pairs.remove_supervisor, sandbox_id))
        # Listed or inspected means it existed, even when the removal then finds
        # it already gone (Podman says 500 "no such ..." under load): Deleted follows.
        for entry in await lookup.all_indexed(self.ctx.podman, self.index, sandbox_id):
            workspace = (entry.labels or {}).get(names.SANDBOX_WORKSPACE, "")
            self.observer.drop(entry.id)
            removal = partial(self.ctx.podman.remove_container, entry.id, self.ctx.settings.stop_timeout)
            await retried(sandbox_id, "removing", removal)
            existed = True
        await pairs.remove_channel(sandbox_id)
        volume = await self.ctx.podman.inspect_volume(names.volume_name(sandbox_id))
        if volume is not None:
            if workspace is None:
                workspace = (volume.labels or {}).get(names.SANDBOX_WORKSPACE)
            await remove_rootfs_image(self.ctx.podman, (volume.labels or {}).get(names.ROOTFS_IMAGE, ""))
            await self.ctx.podman.remove_volume(volume.name)
            existed = True
        self.ctx.files.remove(sandbox_id)
        return existed, workspace
