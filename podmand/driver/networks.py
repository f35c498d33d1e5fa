"""Workspace networks: one isolated bridge per workspace, made on first use and
removed with the workspace's last sandbox.

podmand numbers each new network itself, from the ``network_pool`` setting, so a
workspace holds as many sandboxes as the host does (Podman's own choice is a /24:
253 sandboxes).  A network podmand made or saw is known to exist until podmand
removes it or is told it is gone (:meth:`Networks.forget`): no inspect per create.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Callable, Iterable, Mapping

from .. import names
from ..config import Settings
from ..errors import FailedPrecondition
from ..host import capacity
from ..libpod import PodmanClient, PodmanError
from ..locks import Hold, LockTable
from ..sandbox.spec import check_name
from . import lookup

log = logging.getLogger("podmand.driver")
SUBNET_ATTEMPTS = 16  # subnets tried per new network before giving up
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def pick_subnet(pool: ipaddress.IPv4Network, prefix: int, used: Iterable[IPNetwork]) -> ipaddress.IPv4Network | None:
    """The first ``prefix``-sized subnet of ``pool`` that overlaps none of ``used``;
    None when the pool is full.  Sorted once, so the cost is in ``used``, not the pool."""
    size = 1 << (32 - prefix)
    taken = sorted(
        (int(n.network_address), int(n.broadcast_address)) for n in used if isinstance(n, ipaddress.IPv4Network)
    )
    candidate = int(pool.network_address)
    for low, high in taken:
        if candidate + size - 1 < low:
            break
        if high >= candidate:
            candidate = -(-(high + 1) // size) * size  # the next aligned subnet past this one
    if candidate + size - 1 > int(pool.broadcast_address):
        return None
    return ipaddress.IPv4Network((candidate, prefix))


def subnet_taken(exc: PodmanError) -> bool:
    """Podman refused a subnet another network or a host route already has."""
    return exc.status != 409 and "already used" in exc.message


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
        self.pool = ipaddress.IPv4Network(settings.network_pool)
        self._known: set[str] = set()
        self._prefix = settings.network_prefix

    def name(self, workspace: str) -> str:
        return names.network_name(self.settings.network_name, workspace)

    def lock(self, workspace: str) -> Hold:
        """One lock per network: workspaces "" and "default" share one."""
        return self.locks[f"net:{self.name(workspace)}"]

    def forget(self, workspace: str) -> None:
        """The workspace's network may be gone (a create said so): look again next time."""
        self._known.discard(self.name(workspace))

    @property
    def prefix(self) -> int:
        """The prefix length of a new network: the setting, or sized once from the host."""
        if not self._prefix:
            subids = capacity.host_subids(os.geteuid())
            self._prefix = capacity.workspace_prefix(0, self.pool, subids, self.settings.userns)
            log.info("workspace networks: /%d from %s (%d sandboxes each)", self._prefix, self.pool,
                     capacity.network_hosts(self._prefix))
        return self._prefix

    async def ensure(self, workspace: str) -> str:
        """The workspace's network, made if missing (call under :meth:`lock`)."""
        name = self.name(workspace)
        if name not in self._known:
            if await self.podman.inspect_network(name) is None:
                await self._create(name, workspace)
            self._known.add(name)
        return name

    async def _create(self, name: str, workspace: str) -> None:
        """Number the network from the pool: one list of Podman's networks, then the next
        free subnet each time Podman says one is taken (by a host route, or a network
        another workspace made meanwhile)."""
        networks = await self.podman.list_networks()
        used: list[IPNetwork] = [ipaddress.ip_network(s.subnet, strict=False)
                                 for n in networks for s in n.subnets or ()]
        for _ in range(SUBNET_ATTEMPTS):
            subnet = pick_subnet(self.pool, self.prefix, used)
            if subnet is None:
                break
            body = {
                "name": name,
                "driver": "bridge",
                "dns_enabled": True,
                "options": {"isolate": "true"},
                "subnets": [{"subnet": str(subnet)}],
                "labels": {names.OWNER: names.OWNER_VALUE, names.SANDBOX_WORKSPACE: workspace},
            }
            try:
                await self.podman.create_network(body)
                return
            except PodmanError as exc:
                if exc.status == 409:
                    return
                if not subnet_taken(exc):
                    raise
                used.append(subnet)
        raise FailedPrecondition(
            f"workspace network {name!r} cannot be made: no free /{self.prefix} left in network_pool "
            f"{self.pool} (--network-pool / PODMAND_NETWORK_POOL); choose a larger pool or a smaller network_prefix"
        )

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
            self._known.discard(name)
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
        self._known.discard(name)
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
