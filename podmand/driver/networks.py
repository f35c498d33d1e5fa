"""Workspace networks an older podmand made: one bridge per workspace, which no container
joins any more (a workload has no network, its supervisor uses the host's). podmand makes
none; it removes one with the workspace's last sandbox, and on DeleteWorkspace.
EnsureWorkspace only checks the workspace's name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from .. import names
from ..config import Settings
from ..errors import FailedPrecondition
from ..libpod import PodmanClient, PodmanError
from ..locks import Hold, LockTable
from ..sandbox.spec import check_name
from . import lookup

log = logging.getLogger("podmand.driver")


class Networks:
    """``pending`` says which sandboxes (id -> workspace) have no container yet;
    ``members`` how many sandboxes the driver's index knows on a network (None: it is
    not ready), so a delete lists containers only when that may be the last one."""

    def __init__(
        self,
        podman: PodmanClient,
        settings: Settings,
        locks: LockTable,
        pending: Callable[[], Mapping[str, str]],
        members: Callable[[str], int | None],
    ) -> None:
        self.podman = podman
        self.settings = settings
        self.locks = locks
        self.pending = pending
        self.members = members

    def name(self, workspace: str) -> str:
        return names.network_name(self.settings.network_name, workspace)

    def lock(self, workspace: str) -> Hold:
        """One lock per network: workspaces "" and "default" share one."""
        return self.locks[f"net:{self.name(workspace)}"]

    async def in_use(self, workspace: str) -> int:
        """Sandboxes on the workspace's network, creates still pending included; Podman's
        containers are listed only when the index does not know of one."""
        net = self.name(workspace)
        pending = {sid for sid, ws in self.pending().items() if self.name(ws) == net}
        members = self.members(net)
        if members:
            return members + len(pending)
        users = pending
        for entry in await lookup.containers(self.podman):
            labels = entry.labels or {}
            if names.SANDBOX_WORKSPACE in labels and self.name(labels[names.SANDBOX_WORKSPACE]) == net:
                users.add(labels.get(names.SANDBOX_ID, entry.id))
        return len(users)

    async def remove_unused(self, workspace: str, name: str | None = None) -> bool:
        """Remove the workspace's network (or ``name``) once its last sandbox is gone."""
        async with self.lock(workspace):
            if await self.in_use(workspace):
                return False
            return await self._remove(name or self.name(workspace), quiet=True)

    async def _remove(self, name: str, *, quiet: bool) -> bool:
        """Remove a network podmand owns; True when it was removed."""
        network = await self.podman.inspect_network(name)
        if network is None:
            return False
        if (network.labels or {}).get(names.OWNER) != names.OWNER_VALUE:
            return False
        try:
            removed = await self.podman.remove_network(name)
        except PodmanError as exc:
            if not quiet:
                raise FailedPrecondition(f"workspace network {name!r} cannot be removed: {exc.message}") from exc
            log.info("workspace network %s kept: %s", name, exc.message)
            return False
        return removed

    async def ensure_workspace(self, workspace: str) -> None:
        """Nothing to make: no container joins a workspace network (a workload has no network,
        its supervisor is on the host's); the name is checked all the same."""
        check_name("workspace", workspace, required=False)

    async def delete_workspace(self, workspace: str) -> None:
        check_name("workspace", workspace, required=False)
        async with self.lock(workspace):
            left = await self.in_use(workspace)
            if left:
                raise FailedPrecondition(f"workspace {workspace!r} still has {left} sandbox(es)")
            await self._remove(self.name(workspace), quiet=False)
