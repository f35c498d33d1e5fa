"""The hub's lists of every managed container, on connecting and at each resync, and the
work they start. Its own module because this is the hub's reconciliation with Podman: it
would be needed, and work the same, if Podman's event stream said nothing.

Each time the event subscription opens, one list teaches the driver's index every
container and each is looked at once; streams are served when those looks are back
(or ``FIRST_LOOKS`` seconds have passed). Every resync one more list finds what
events missed: a state the hub did not see (looked at again), a sandbox gone out of
band (forgotten, and Deleted sent), garbage (collected). One list at a time, in a task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Protocol

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..libpod import ContainerListEntry, PodmanError, PodmanUnavailable, PodmanUnreadable
from .fanout import Fanout
from .inbox import Inbox, Listed, Lost, Observed
from .looks import Looks, Observing

log = logging.getLogger("podmand.watch.hub")

# Seconds new streams wait for the first looks after connecting: a container whose
# inspect hangs (Podman holds its lock) must not keep every stream, and start-up, waiting.
FIRST_LOOKS = 5.0


class Listing(Observing, Protocol):
    """What the lists need of the driver (besides what a look needs)."""

    async def listed(self) -> list[ContainerListEntry]: ...

    async def collect_garbage(self) -> list[str]: ...

    def pending(self, besides: set[str]) -> list[pb.DriverSandbox]: ...

    def changed(self, entry: ContainerListEntry) -> bool: ...


class Lists:
    def __init__(self, sandboxes: Listing, inbox: Inbox, looks: Looks, fanout: Fanout) -> None:
        self.sandboxes = sandboxes
        self.inbox = inbox
        self.looks = looks
        self.fanout = fanout
        self._work: set[asyncio.Task[None]] = set()  # lists and what they start (forgets, garbage collection)
        self._listing = False
        self._first: set[str] | None = None  # first looks still out after connecting
        self._first_due: asyncio.TimerHandle | None = None

    def ask(self, *, first: bool, subscription: int) -> None:
        """One list of every managed container, in a task (at most one at a time), for
        event subscription ``subscription``."""
        if self._listing:
            return
        self._listing = True
        told = frozenset(self.fanout.told)

        async def lister() -> None:
            try:
                entries = await self.sandboxes.listed()
            except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
                if first:  # no index, no snapshot: subscribe again
                    self.inbox.put(Lost(exc, subscription))
                else:
                    log.warning("watch: resync could not list containers: %s", exc)
                    self._listing = False
                return
            self.inbox.put(Listed(entries, first, told, subscription))

        self._keep(lister())

    def listed(self, message: Listed, count: int) -> None:
        """A list came back (handled as message ``count``, of the open subscription)."""
        self._listing = False
        present: set[str] = set()
        for entry in message.entries:
            sandbox_id = (entry.labels or {}).get(names.SANDBOX_ID, "")
            if not sandbox_id:
                continue
            present.add(sandbox_id)
            if message.first or self.sandboxes.changed(entry):
                self.looks.look(entry.id, sandbox_id, count, message.subscription)
        if message.first:
            self._first = self.looks.in_flight()
            self._first_due = asyncio.get_running_loop().call_later(FIRST_LOOKS, self._serve_anyway)
            self._served_if_ready()
            return
        pending = {s.id for s in self.sandboxes.pending(besides=set())}
        for sandbox_id in sorted(message.told - present - pending):
            if sandbox_id in self.fanout.told:  # not deleted since: gone out of band, or missed
                self._keep(self._forget(sandbox_id, count))
        self._keep(self._collect())

    def looked(self, container_id: str) -> None:
        """A look came back: streams are served once the first ones all are."""
        if self._first is not None:
            self._first.discard(container_id)
            self._served_if_ready()

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel the lists and what they started (their event subscription ended); the tasks, to wait for."""
        tasks = list(self._work)
        for task in tasks:
            task.cancel()
        self._work.clear()
        self._listing = False
        self._first = None
        if self._first_due is not None:
            self._first_due.cancel()
            self._first_due = None
        return tasks

    def _keep(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    def _serve_anyway(self) -> None:
        if self._first:
            log.warning("watch: %d container(s) not looked at after %.0f s; serving streams without them",
                        len(self._first), FIRST_LOOKS)
            self._first = set()
            self._served_if_ready()

    def _served_if_ready(self) -> None:
        if not self._first:
            self._first = None
            if self._first_due is not None:
                self._first_due.cancel()
                self._first_due = None
            self.fanout.serve()

    async def _forget(self, sandbox_id: str, asked: int) -> None:
        try:
            deleted = await asyncio.shield(self.sandboxes.forget(sandbox_id))
        except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
            log.warning("watch: could not check sandbox %s: %s", sandbox_id, exc)
            return
        self.inbox.put(Observed("", sandbox_id, None, deleted, asked))

    async def _collect(self) -> None:
        try:
            await self.sandboxes.collect_garbage()
        except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
            log.warning("watch: garbage collection failed: %s", exc)
