"""What the driver tells watch streams, and the sink it tells it through.

The driver never knows who listens: it is given an :class:`EventSink` at
construction (the hub's inbox in podmand, a list in tests).
"""

from __future__ import annotations

from typing import Protocol

from .._proto import compute_driver_pb2 as pb
from ..sandbox import snapshots


class EventSink(Protocol):
    def publish(self, event: pb.WatchSandboxesEvent) -> None:
        """Send ``event`` to every watch stream, in order with everything else."""

    def refresh(self, container_id: str, sandbox_id: str, *, started: bool = False) -> None:
        """Ask for a fresh look at a container (its change reaches the streams); ``started``:
        the driver has just started it, so Podman's create, init and start events of that
        start are older than what this look reads (the hub skips their looks)."""


def platform_event(
    sandbox_id: str, reason: str, message: str, *, warning: bool = False, metadata: dict[str, str] | None = None
) -> pb.WatchSandboxesEvent:
    event = pb.DriverPlatformEvent(
        source="podman",
        type="Warning" if warning else "Normal",
        reason=reason,
        message=message,
        metadata=metadata or {},
    )
    event.event_time.CopyFrom(snapshots.now())
    return pb.WatchSandboxesEvent(platform_event=pb.WatchSandboxesPlatformEvent(sandbox_id=sandbox_id, event=event))


def sandbox_event(sandbox: pb.DriverSandbox) -> pb.WatchSandboxesEvent:
    return pb.WatchSandboxesEvent(sandbox=pb.WatchSandboxesSandboxEvent(sandbox=sandbox))


def deleted_event(sandbox_id: str) -> pb.WatchSandboxesEvent:
    return pb.WatchSandboxesEvent(deleted=pb.WatchSandboxesDeletedEvent(sandbox_id=sandbox_id))
