"""The anchor for ``serve``'s start-up: the libpod calls ``serve`` makes before it says
SERVING, made raw from a process that has already started and imported everything.

What ``podmand serve`` waits on with no sandboxes (server.py): ``/_ping`` to find Podman,
then, at once, ``/info``, the state-directory probe (a list of images, a create and a
remove of a never-started container: host/sharedpaths.py), and the event subscription
followed by the hub's first list of managed containers (one inspect per container found).
Here they run in the same order and overlap, with podmand's own libpod client (the
``raw`` side of every other bench), so ``serve``'s figure over this one is the process:
interpreter start, imports, the gRPC server and the driver.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from podmand import names
from podmand.host.sharedpaths import probe
from podmand.libpod import PodmanClient


async def _subscribed_then_listed(podman: PodmanClient) -> None:
    async with podman.events([f"{names.OWNER}={names.OWNER_VALUE}"]):
        entries = await podman.list_containers(list(names.MANAGED_FILTER))
        await asyncio.gather(*(podman.inspect_container(e.id) for e in entries))


async def once(socket: str) -> float:
    """Seconds from the first ``/_ping`` until every call above has answered."""
    with tempfile.TemporaryDirectory(prefix="podmand-bench-raw-") as state:
        podman = PodmanClient(socket)
        try:
            start = time.perf_counter()
            await podman.ping()
            await asyncio.gather(podman.info(), probe(podman, Path(state)), _subscribed_then_listed(podman))
            return time.perf_counter() - start
        finally:
            await podman.close()


def startup_calls(socket: str) -> float:
    return asyncio.run(once(socket))
