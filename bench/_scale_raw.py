"""The raw side of bench/scale.py and bench/create_cpu.py: the same pairs made by podmand's
own libpod client, with nothing of podmand in between, and the clean-up of everything
either side made.

A raw sandbox is the pair's skeleton of bench/_pair.py (a workspace and a channel volume,
a workload and a supervisor container, each a shell that exits on SIGTERM), made in the
pair's order and stopped and removed supervisor first, as podmand does. Each object carries
:data:`RAW_LABEL`, not podmand's owner label: the podmand under test never sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from bench import _pair
from podmand import names
from podmand.libpod import PodmanClient, PodmanError

RAW_LABEL = "io.podmand.bench"
RAW_VALUE = "scale-raw"
LABELS = {RAW_LABEL: RAW_VALUE}


@dataclass(frozen=True)
class Images:
    """The image IDs a raw pair is made of (podmand pins its images by ID too)."""

    sandbox: str
    supervisor: str

    @classmethod
    async def of(cls, podman: PodmanClient) -> Images:
        return cls((await podman.inspect_image(_pair.SANDBOX_IMAGE)).id,
                   (await podman.inspect_image(_pair.SUPERVISOR_IMAGE)).id)


async def create(podman: PodmanClient, sid: str, images: Images) -> float:
    """Both volumes, the workload, the supervisor, then their starts; seconds taken."""
    begin = time.perf_counter()
    for volume in _pair.volumes(sid):
        await podman.create_volume(volume, LABELS)
    await podman.create_container(_pair.workload(sid, images.sandbox, LABELS))
    await podman.create_container(_pair.supervisor(sid, images.supervisor, LABELS))
    await start(podman, sid)
    return time.perf_counter() - begin


async def start(podman: PodmanClient, sid: str) -> None:
    """The workload, then the supervisor."""
    for name in _pair.containers(sid):
        await podman.start_container(name)


async def stop(podman: PodmanClient, sid: str) -> None:
    """The supervisor, then the workload (SIGTERM, then SIGKILL after the stop timeout)."""
    for name in reversed(_pair.containers(sid)):
        await podman.stop_container(name, _pair.STOP_TIMEOUT)


async def delete(podman: PodmanClient, sid: str) -> None:
    """Force-remove the supervisor, then the workload (SIGTERM first, as podmand's delete),
    then both volumes."""
    for name in reversed(_pair.containers(sid)):
        await podman.remove_container(name, _pair.STOP_TIMEOUT)
    for volume in _pair.volumes(sid):
        await podman.remove_volume(volume)


async def timed(coro: Any) -> float:
    begin = time.perf_counter()
    await coro
    return time.perf_counter() - begin


async def bounded(jobs: list[Any], width: int) -> None:
    """Run the coroutines ``width`` at a time."""
    gate = asyncio.Semaphore(width)

    async def one(job: Any) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


async def workloads(podman: PodmanClient, prefix: str) -> dict[str, str]:
    """The workload container ID of each podmand sandbox whose id starts with ``prefix``."""
    entries = await podman.list_containers([names.SANDBOX_ID, f"{names.ISOLATION_ROLE}={names.ROLE_WORKLOAD}"])
    return {
        sid: e.id for e in entries if (sid := (e.labels or {}).get(names.SANDBOX_ID, "")).startswith(prefix)
    }


async def sweep(podman: PodmanClient, sandbox_prefix: str) -> int:
    """Remove every container and volume this run made (the raw label, or a podmand sandbox
    id with this run's prefix: both containers and both volumes of a pair carry it); how
    many were removed."""
    removed = 0
    entries = [*await podman.list_containers([f"{RAW_LABEL}={RAW_VALUE}"]),
               *await podman.list_containers([names.SANDBOX_ID])]
    for entry in sorted(entries, key=_supervisor_first):
        labels = entry.labels or {}
        if labels.get(RAW_LABEL) == RAW_VALUE or labels.get(names.SANDBOX_ID, "").startswith(sandbox_prefix):
            with contextlib.suppress(PodmanError):
                removed += await podman.remove_container(entry.id, 0)
    for volume in [*await podman.list_volumes([f"{RAW_LABEL}={RAW_VALUE}"]),
                   *await podman.list_volumes([names.SANDBOX_ID])]:
        labels = volume.labels or {}
        if labels.get(RAW_LABEL) == RAW_VALUE or labels.get(names.SANDBOX_ID, "").startswith(sandbox_prefix):
            with contextlib.suppress(PodmanError):
                removed += await podman.remove_volume(volume.name)
    return removed


def _supervisor_first(entry: Any) -> bool:
    return (entry.labels or {}).get(names.ISOLATION_ROLE) != names.ROLE_SUPERVISOR
