"""Finding a sandbox's containers: podmand's labels are the only index."""

from __future__ import annotations

from .. import names
from ..libpod import ContainerListEntry, PodmanClient


async def containers(podman: PodmanClient, sandbox_id: str | None = None) -> list[ContainerListEntry]:
    """Every managed sandbox container, or those of one sandbox."""
    labels = list(names.MANAGED_FILTER)
    if sandbox_id is not None:
        labels.append(f"{names.SANDBOX_ID}={sandbox_id}")
    return await podman.list_containers(labels)


async def find(podman: PodmanClient, sandbox_id: str) -> ContainerListEntry | None:
    entries = await containers(podman, sandbox_id)
    return entries[0] if entries else None
