"""The looks at containers in flight: inspects off the hub task, one per container, their
answers ordered against the driver's own word. Its own module because that bookkeeping is
the same whoever asks for a look (an event, a refresh, a list).

The hub never waits for Podman, so each look (an inspect, and a forget when the
container is gone) runs in a task of its own and answers through the inbox: at most
``LOOKS`` at once, one per container (a change during a look asks for one more, so a
burst of events costs one or two inspects). A look asked for before the driver's own
word on its sandbox is dropped: its answer, from an older Podman, would roll streams back.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from .._proto import compute_driver_pb2 as pb
from ..driver.events import deleted_event, sandbox_event
from ..errors import DriverError
from ..libpod import PodmanError, PodmanUnavailable, PodmanUnreadable
from .inbox import Inbox, Observed

log = logging.getLogger("podmand.watch.hub")

# Inspects the hub runs at once: enough to look at 500 containers in well under a
# second, few enough to leave the libpod pool to the RPCs.
LOOKS = 4


class Observing(Protocol):
    """What a look needs of the driver."""

    async def observe(self, container_id: str) -> pb.DriverSandbox | None: ...

    async def forget(self, sandbox_id: str, container_id: str = "") -> bool: ...


class Looks:
    def __init__(self, sandboxes: Observing, inbox: Inbox) -> None:
        self.sandboxes = sandboxes
        self.inbox = inbox
        self._looking: dict[str, asyncio.Task[None]] = {}  # container id -> its look in flight
        self._again: dict[str, tuple[str, bool]] = {}  # looks asked for while one was in flight
        # Sandbox id -> message count of the driver's last word on it (a snapshot it
        # published, or Deleted): a look asked for before that is out of date.
        self._said_at: dict[str, int] = {}
        self._looks = asyncio.Semaphore(LOOKS)

    def look(self, container_id: str, sandbox_id: str, asked: int, subscription: int, *, removed: bool = False) -> None:
        """Look at a container (in a task), asked at message ``asked`` of event subscription
        ``subscription``; one look at a time per container."""
        if container_id in self._looking:
            before = self._again.get(container_id)
            self._again[container_id] = (sandbox_id or (before[0] if before else ""), removed)
            return
        looker = self._looker(container_id, sandbox_id, removed, asked, subscription)
        self._looking[container_id] = asyncio.get_running_loop().create_task(looker)

    def in_flight(self) -> set[str]:
        """The containers being looked at."""
        return set(self._looking)

    def said(self, sandbox_id: str, count: int) -> None:
        """The driver's own word on ``sandbox_id`` at message ``count``: looks asked for before it are out of date."""
        self._said_at[sandbox_id] = count

    def answered(self, message: Observed, count: int, subscription: int) -> pb.WatchSandboxesEvent | None:
        """A look came back (handled as message ``count``): what streams are to be told of
        it, if anything; a look asked for meanwhile starts now."""
        container_id, sandbox_id = message.container_id, message.sandbox_id
        self._looking.pop(container_id, None)
        event = None
        if message.snap is not None:
            if self._said_at.get(message.snap.id, -1) <= message.asked:  # not overtaken by the driver's word
                event = sandbox_event(message.snap)
        elif message.deleted:
            self._said_at[sandbox_id] = count
            event = deleted_event(sandbox_id)
        again = self._again.pop(container_id, None)
        if again is not None:
            self.look(container_id, again[0] or sandbox_id, count, subscription, removed=again[1])
        if not self._looking:
            self._said_at.clear()  # no look left that the driver's word could overtake
        return event

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel every look (their event subscription ended); the tasks, to wait for."""
        tasks = list(self._looking.values())
        for task in tasks:
            task.cancel()
        self._looking.clear()
        self._again.clear()
        self._said_at.clear()
        return tasks

    async def _looker(self, container_id: str, sandbox_id: str, removed: bool, asked: int, subscription: int) -> None:
        snap: pb.DriverSandbox | None = None
        deleted = False
        try:
            async with self._looks:
                if not removed:  # Podman said it removed the container: nothing to inspect
                    snap = await self.sandboxes.observe(container_id)
                if snap is None and sandbox_id:  # clean-up is not cut short by a lost subscription
                    deleted = await asyncio.shield(self.sandboxes.forget(sandbox_id, container_id))
        except PodmanUnavailable as exc:  # the event stream breaks too: that is handled there
            log.debug("watch: Podman unavailable while looking at %s: %s", container_id[:12], exc)
        except (PodmanError, PodmanUnreadable, DriverError) as exc:  # a forget's removal Podman failed (teardown.py)
            log.warning("watch: Podman error while looking at %s: %s", container_id[:12], exc)
        except Exception:
            log.exception("watch: failed to look at container %s", container_id[:12])
        self.inbox.put(Observed(container_id, sandbox_id, snap, deleted, asked, subscription))
