"""Why a workload ended before its supervisor confirmed it, read from its log. Its own module
because it is the one place podmand reads a sandbox's output, and that read must stay bounded
whatever the tenant wrote.

The runtime (``openshell-sandbox``) that gets SIGTERM or SIGINT before the supervisor's
confirmation logs one fixed line, "sandbox boundary received SIGTERM before supervisor
confirmation", and exits non-zero (contract §7.1). Upstream's driver scans the last 200 log
lines of an exited workload for it and appends it to the ``ContainerExited`` message (§4.6),
so the gateway's user sees that the sandbox was stopped while it was still being set up,
not that it failed. podmand does the same, once per end of each container (the answer is
kept until the container runs again or goes), keeping at most the last :data:`MAX_BYTES` of
that tail: a tenant's long lines cost the driver no more memory. The runtime writes the line with one
write, so it is whole within one of the log's frames and a search of the raw bytes finds it.
"""

from __future__ import annotations

import asyncio
import logging
import re

from .._proto import compute_driver_pb2 as pb
from ..libpod import ContainerInspect, PodmanClient, PodmanError, PodmanUnavailable

log = logging.getLogger("podmand.driver")

TAIL_LINES = 200
MAX_BYTES = 256 * 1024
READ_TIMEOUT = 10.0
MARKER = re.compile(rb"sandbox boundary received (SIGTERM|SIGINT) before supervisor confirmation")


class ExitMarkers:
    def __init__(self, podman: PodmanClient) -> None:
        self.podman = podman
        self._seen: dict[str, tuple[str, str]] = {}  # container id -> (FinishedAt, marker or "")

    async def annotate(self, info: ContainerInspect, snap: pb.DriverSandbox) -> None:
        """Append the marker to an exited workload's ``ContainerExited`` message when its log
        has it (read once per end; a log Podman cannot give is read again next time)."""
        ready = snap.status.conditions[0]
        if ready.reason != "ContainerExited":
            return
        finished = info.state.finished_at
        seen = self._seen.get(info.id)
        if seen is None or seen[0] != finished:
            marker = await self._read(info.id)
            if marker is None:
                return
            seen = self._seen[info.id] = (finished, marker)
        if seen[1]:
            ready.message = f"{ready.message}: {seen[1]}"

    def drop(self, container_id: str) -> None:
        self._seen.pop(container_id, None)

    async def _read(self, container_id: str) -> str | None:
        """The marker the log's tail holds, "" when none, None when the log could not be read."""
        tail = bytearray()

        async def gather() -> None:
            async with self.podman.container_logs(container_id, follow=False, tail=TAIL_LINES) as chunks:
                async for chunk in chunks:
                    tail.extend(chunk)
                    del tail[:-MAX_BYTES]  # the end of the tail is what counts

        try:
            await asyncio.wait_for(gather(), READ_TIMEOUT)
        except (PodmanError, PodmanUnavailable, TimeoutError) as exc:
            log.debug("container %s: its log could not be read: %s", container_id[:12], exc)
            return None
        found = MARKER.search(tail)
        return found.group(0).decode() if found else ""
