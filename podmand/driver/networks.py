"""Workspace networks: one isolated bridge per workspace, made on first use and
removed with the workspace's last sandbox."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .. import names
from ..config import Settings
from ..errors import FailedPrecondition
from ..libpod import PodmanClient, PodmanError
from ..locks import Hold, LockTable
from ..spec import check_name
from . import lookup

log = logging.getLogger("podmand.driver")


@dataclass(frozen=True)
class Networks:
    """``pending`` says which sandboxes (id -> workspace) have no container yet."""

    podman: PodmanClient
    settings: Settings
    locks: LockTable
    pending: Callable[[], Mapping[str, str]]

    def name(self, workspace: str) -> str:
        return names.network_name(self.settings.network_name, workspace)

    def lock(self, workspace: str) -> Hold:
        """One lock per network: workspaces "" and "default" share one."""
        return self.locks[f"net:{self.name(workspace)}"]

    async def ensure(self, workspace: str) -> str:
        """The workspace's network, made if missing (call under :meth:`lock`)."""
        name = self.name(workspace)
        if await self.podman.inspect_network(name) is None:
            body = {
                "name": name,
                "driver": "bridge",
                "dns_enabled": True,
                "options": {"isolate": "true"},
                "labels": {names.OWNER: names.OWNER_VALUE, names.SANDBOX_WORKSPACE: workspace},
            }
            try:
                await self.podman.create_network(body)
            except PodmanError as exc:
                if exc.status != 409:
                    raise
        return name

    async def users(self, workspace: str) -> set[str]:
        """Sandbox ids on the workspace's network: containers and creates still pending."""
        net = self.name(workspace)
        users = {sid for sid, ws in self.pending().items() if self.name(ws) == net}
        for entry in await lookup.containers(self.podman):
            labels = entry.labels or {}
            if names.SANDBOX_WORKSPACE in labels and self.name(labels[names.SANDBOX_WORKSPACE]) == net:
                users.add(labels.get(names.SANDBOX_ID, entry.id))
        return users

    async def remove_unused(self, workspace: str, name: str | None = None) -> bool:
        """Remove the workspace's network (or ``name``) once its last sandbox is gone."""
        async with self.lock(workspace):
            if await self.users(workspace):
                return False
            return await self._remove(name or self.name(workspace), quiet=True)

    async def _remove(self, name: str, *, quiet: bool) -> bool:
        """Remove a network podmand owns; True when it was removed."""
        network = await self.podman.inspect_network(name)
        if network is None or (network.labels or {}).get(names.OWNER) != names.OWNER_VALUE:
            return False
        try:
            return await self.podman.remove_network(name)
        except PodmanError as exc:
            if not quiet:
                raise FailedPrecondition(f"workspace network {name!r} cannot be removed: {exc.message}") from exc
            log.info("workspace network %s kept: %s", name, exc.message)
            return False

    async def ensure_workspace(self, workspace: str) -> None:
        check_name("workspace", workspace, required=False)
        async with self.lock(workspace):
            await self.ensure(workspace)

    async def delete_workspace(self, workspace: str) -> None:
        check_name("workspace", workspace, required=False)
        async with self.lock(workspace):
            left_ids = await self.users(workspace)
            if left_ids:
                raise FailedPrecondition(f"workspace {workspace!r} still has {len(left_ids)} sandbox(es)")
            await self._remove(self.name(workspace), quiet=False)
