"""Finding a sandbox's containers: the index first, podmand's labels when it cannot say."""

from __future__ import annotations

from .. import names
from ..libpod import ContainerInspect, ContainerListEntry, PodmanClient
from .index import Index, known_from_inspect


async def containers(podman: PodmanClient, sandbox_id: str | None = None) -> list[ContainerListEntry]:
    """Every managed sandbox container, or those of one sandbox (a label-filtered list):
    only those whose names match their labels (:func:`names.sandbox_of`)."""
    return (await with_supervisors(podman, sandbox_id))[0]


async def with_supervisors(
    podman: PodmanClient, sandbox_id: str | None = None
) -> tuple[list[ContainerListEntry], dict[str, ContainerListEntry]]:
    """:func:`containers`, and the supervisors by sandbox id
    (:func:`names.supervisor_of`), from the same list."""
    labels = list(names.MANAGED_FILTER)
    if sandbox_id is not None:
        labels.append(f"{names.SANDBOX_ID}={sandbox_id}")
    entries = await podman.list_containers(labels)
    supervisors = {sid: e for e in entries if (sid := names.supervisor_of(entry_name(e), e.labels or {}))}
    return [e for e in entries if names.sandbox_of(entry_name(e), e.labels or {})], supervisors


def entry_name(entry: ContainerListEntry) -> str:
    return (entry.names or [""])[0]


async def find(podman: PodmanClient, sandbox_id: str) -> ContainerListEntry | None:
    entries = await containers(podman, sandbox_id)
    return entries[0] if entries else None


def entry_of(info: ContainerInspect) -> ContainerListEntry:
    """An inspect in the list endpoint's shape (what the RPCs read of a lookup)."""
    return ContainerListEntry(id=info.id, names=[info.name], state=info.state.status, labels=info.labels)


async def find_indexed(podman: PodmanClient, index: Index, sandbox_id: str) -> ContainerListEntry | None:
    """The sandbox's container: one inspect when the index knows it, a list otherwise."""
    for container_id in index.containers(sandbox_id) or ():
        info = await podman.inspect_container_or_none(container_id)
        known = known_from_inspect(info) if info is not None else None
        if info is None or known is None or known.sandbox_id != sandbox_id:
            index.drop(container_id)
            continue
        return entry_of(info)
    entry = await find(podman, sandbox_id)
    if entry is not None:
        index.learn([entry])
    return entry


async def all_indexed(podman: PodmanClient, index: Index, sandbox_id: str) -> list[ContainerListEntry]:
    """Every container of the sandbox: the index's (no call) when it knows any, a list otherwise."""
    ids = index.containers(sandbox_id)
    if ids is None:
        return await containers(podman, sandbox_id)
    return [
        ContainerListEntry(id=k.container_id, state=k.state, labels={names.SANDBOX_WORKSPACE: k.workspace})
        for k in (index.get(cid) for cid in ids)
        if k is not None
    ]
