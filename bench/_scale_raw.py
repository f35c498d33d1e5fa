"""The raw side of bench/scale.py: the same work done by podmand's own libpod client,
with nothing of podmand in between, and the clean-up of everything either side made.

A raw sandbox is what podmand's container spec (podmand/sandbox/spec.py) boils down to for
Podman: a named volume at /sandbox, the same image, ``userns=auto`` with 1024 ids, a
bridge network of the same shape as a workspace network, stop signal 15 with a 5 s
timeout.  Its PID 1 is a shell that exits on SIGTERM (as the supervisor does).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from podmand import names
from podmand.libpod import PodmanClient, PodmanError

RAW_LABEL = "io.podmand.bench"
RAW_VALUE = "scale-raw"
COMMAND = ["/bin/sh", "-c", 'trap "exit 0" TERM; sleep 3600 & wait']
STOP_TIMEOUT = 5


def network_body(name: str) -> dict[str, Any]:
    """A workspace network as podmand's driver/networks.py makes it (its labels aside)."""
    return {
        "name": name,
        "driver": "bridge",
        "dns_enabled": True,
        "options": {"isolate": "true"},
        "labels": {RAW_LABEL: RAW_VALUE},
    }


def container_spec(name: str, image_id: str, network: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": image_id,
        "labels": {RAW_LABEL: RAW_VALUE},
        "command": COMMAND,
        "user": "0:0",
        "volumes": [{"Name": name, "Dest": names.WORKSPACE_PATH, "Options": ["rw"]}],
        "netns": {"nsmode": "bridge"},
        "Networks": {network: {}},
        "stop_signal": 15,
        "stop_timeout": STOP_TIMEOUT,
        "userns": {"nsmode": "auto"},
        "idmappings": {
            "HostUIDMapping": False,
            "HostGIDMapping": False,
            "AutoUserNs": True,
            "AutoUserNsOpts": {"Size": 1024},
        },
    }


async def create(podman: PodmanClient, name: str, image_id: str, network: str) -> float:
    """Volume create + container create + start; seconds taken."""
    begin = time.perf_counter()
    await podman.create_volume(name, {RAW_LABEL: RAW_VALUE})
    await podman.create_container(container_spec(name, image_id, network))
    await podman.start_container(name)
    return time.perf_counter() - begin


async def delete(podman: PodmanClient, name: str) -> None:
    """Force-remove the container (SIGTERM first, as podmand's delete) and its volume."""
    await podman.remove_container(name, STOP_TIMEOUT)
    await podman.remove_volume(name)


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


async def sweep(podman: PodmanClient, sandbox_prefix: str, networks: list[str]) -> int:
    """Remove every container and volume this run made (raw label, or a podmand sandbox id
    with this run's prefix) and its networks; how many items were removed."""
    removed = 0
    mine = [f"{RAW_LABEL}={RAW_VALUE}"]
    entries = [*await podman.list_containers(mine), *await podman.list_containers([names.SANDBOX_ID])]
    for entry in entries:
        labels = entry.labels or {}
        if labels.get(RAW_LABEL) == RAW_VALUE or labels.get(names.SANDBOX_ID, "").startswith(sandbox_prefix):
            with contextlib.suppress(PodmanError):
                removed += await podman.remove_container(entry.id, 0)
    for volume in [*await podman.list_volumes(mine), *await podman.list_volumes([names.SANDBOX_ID])]:
        labels = volume.labels or {}
        if labels.get(RAW_LABEL) == RAW_VALUE or labels.get(names.SANDBOX_ID, "").startswith(sandbox_prefix):
            with contextlib.suppress(PodmanError):
                removed += await podman.remove_volume(volume.name)
    for network in networks:
        with contextlib.suppress(PodmanError):
            removed += await podman.remove_network(network)
    return removed
