"""Everything the hub handles, as typed messages, in one queue.

The inbox is made before the driver and the hub: it is the driver's event sink
(``publish``, ``refresh``) and the hub's input.  The hub's own tasks (the Podman
event pump, lists, looks) answer through it too, so the hub task sees one order.
It also stamps when the driver asked its look after a start it made (``refresh(started=True)``),
at the moment it asks, so the hub can tell Podman's events that look already covers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from .._proto import compute_driver_pb2 as pb
from ..libpod import BadEvent, ContainerListEntry, Event
from .streams import Stream

# Starts the inbox remembers (refresh(started=True)) until their start event comes.
STARTED_KEPT = 1024


@dataclass(frozen=True)
class Publish:
    """The driver's own event, for every stream."""

    event: pb.WatchSandboxesEvent


@dataclass(frozen=True)
class Refresh:
    """Look at a container again (the driver changed it; an exit file or /wait says it ended)."""

    container_id: str
    sandbox_id: str


@dataclass(frozen=True)
class Subscribe:
    stream: Stream


@dataclass(frozen=True)
class Resync:
    """Compare Podman with what every stream was told (one list, in a task)."""


@dataclass(frozen=True)
class Listed:
    """A list's answer: ``first`` on connecting (every container is looked at once),
    else a resync's, which looks only at what the hub did not see change."""

    entries: list[ContainerListEntry]
    first: bool
    told: frozenset[str]  # sandboxes the hub had told of when the list was asked for
    subscription: int  # which event subscription asked (an answer to an earlier one is ignored)


@dataclass(frozen=True)
class Observed:
    """A look at one container came back: its snapshot, or None when it is gone
    (``deleted``: and its sandbox with it)."""

    container_id: str
    sandbox_id: str
    snap: pb.DriverSandbox | None
    deleted: bool
    asked: int  # the hub's message count when the look was asked for
    subscription: int = -1  # which event subscription asked (-1: any)


@dataclass(frozen=True)
class PodmanEvent:
    event: Event


@dataclass(frozen=True)
class Unreadable:
    """A Podman event line that could not be read."""

    bad: BadEvent


@dataclass(frozen=True)
class Lost:
    """Podman's event stream ended (``error``: how it broke, None: it ended cleanly)."""

    error: Exception | None
    subscription: int = -1  # which event subscription it ends (-1: whichever is open)


Message = Publish | Refresh | Subscribe | Resync | Listed | Observed | PodmanEvent | Unreadable | Lost


class Inbox:
    """Everything the hub task handles, in order.  Made before the driver and the
    hub, it is the driver's event sink and the hub's input."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Message] = asyncio.Queue()
        # Container id -> when the driver asked its look after starting it (refresh(started=True)).
        self._started: dict[str, int] = {}

    def put(self, message: Message) -> None:
        self._queue.put_nowait(message)

    async def get(self) -> Message:
        return await self._queue.get()

    def get_nowait(self) -> Message | None:
        """The next message, or None when the inbox is empty."""
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None

    def publish(self, event: pb.WatchSandboxesEvent) -> None:
        self.put(Publish(event))

    def refresh(self, container_id: str, sandbox_id: str, *, started: bool = False) -> None:
        if started:
            self._started[container_id] = time.time_ns()
            while len(self._started) > STARTED_KEPT:
                del self._started[next(iter(self._started))]
        self.put(Refresh(container_id, sandbox_id))

    def started_at(self, container_id: str) -> int:
        """When (epoch ns) the driver, having started ``container_id`` itself, asked for
        its look; 0 if it did not (or that was long ago)."""
        return self._started.get(container_id, 0)

    def seen_start(self, container_id: str) -> None:
        """The start event of that start came: nothing more of it is to be skipped."""
        self._started.pop(container_id, None)
