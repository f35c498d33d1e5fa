"""The hub's lists of every managed container, on connecting and at each resync, and the
work they start. Its own module because this is the hub's reconciliation with Podman: it
would be needed, and work the same, if Podman's event stream said nothing.

Each time the event subscription opens, one list teaches the driver's index every
container and tells streams a first snapshot of each, built from its list entry
(``Listing.first_snapshot``); streams are served as soon as that list is back, with
no inspect waited for: at N sandboxes serving waits on one list, not on N inspects.
Every listed container is then looked at (inspected) in the background, at most
``looks.LOOKS`` at once, and the look refines what was told: streams hear of it only
when the refined snapshot differs (each stream drops a repeat). What a list entry
cannot say (an OOM kill, a health status Podman's list omits, fence evidence not kept
from an earlier run) is thus right once that container's look is back: after about
N / LOOKS inspects. Every resync one more list finds what events missed: a state
the hub did not see (looked at again), a sandbox gone out of band (forgotten, and
Deleted sent), garbage (collected). One list at a time, in a task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Protocol

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..driver.events import sandbox_event
from ..errors import DriverError
from ..libpod import ContainerListEntry, PodmanError, PodmanUnavailable, PodmanUnreadable
from .fanout import Fanout
from .inbox import Inbox, Listed, Lost, Observed
from .looks import Looks, Observing

log = logging.getLogger("podmand.watch.hub")

class Listing(Observing, Protocol):
    """What the lists need of the driver (besides what a look needs)."""

    async def listed(self) -> list[ContainerListEntry]: ...

    async def collect_garbage(self) -> list[str]: ...

    def pending(self, besides: set[str]) -> list[pb.DriverSandbox]: ...

    def changed(self, entry: ContainerListEntry) -> bool: ...

    def first_snapshot(self, entry: ContainerListEntry) -> pb.DriverSandbox | None: ...


class Lists:
    def __init__(self, sandboxes: Listing, inbox: Inbox, looks: Looks, fanout: Fanout) -> None:
        self.sandboxes = sandboxes
        self.inbox = inbox
        self.looks = looks
        self.fanout = fanout
        self._work: set[asyncio.Task[None]] = set()  # lists and what they start (forgets, garbage collection)
        self._listing = False
        # Sandboxes streams were told of since the first list was asked for (None: no
        # first list out): its entries are older than that word and must not roll it back.
        self._heard: set[str] | None = None

    def ask(self, *, first: bool, subscription: int) -> None:
        """One list of every managed container, in a task (at most one at a time), for
        event subscription ``subscription``."""
        if self._listing:
            return
        self._listing = True
        told = frozenset(self.fanout.told)
        if first:
            self._heard = set()

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

    def heard(self, sandbox_id: str) -> None:
        """Streams were told something of ``sandbox_id`` (a snapshot or Deleted)."""
        if self._heard is not None:
            self._heard.add(sandbox_id)

    def listed(self, message: Listed, count: int) -> None:
        """A list came back (handled as message ``count``, of the open subscription)."""
        self._listing = False
        if message.first:
            self._first_listed(message, count)
            return
        present: set[str] = set()
        for entry in message.entries:
            sandbox_id = (entry.labels or {}).get(names.SANDBOX_ID, "")
            if not sandbox_id:
                continue
            present.add(sandbox_id)
            if self.sandboxes.changed(entry):
                self.looks.look(entry.id, sandbox_id, count, message.subscription)
        pending = {s.id for s in self.sandboxes.pending(besides=set())}
        for sandbox_id in sorted(message.told - present - pending):
            if sandbox_id in self.fanout.told:  # not deleted since: gone out of band, or missed
                self._keep(self._forget(sandbox_id, count))
        self._keep(self._collect())

    def _first_listed(self, message: Listed, count: int) -> None:
        """Tell each listed sandbox's first snapshot, serve streams, then look at every container."""
        heard, self._heard = self._heard or set(), None
        for entry in message.entries:
            sandbox_id = (entry.labels or {}).get(names.SANDBOX_ID, "")
            if not sandbox_id:
                continue
            if sandbox_id not in heard:
                snap = self.sandboxes.first_snapshot(entry)
                if snap is not None:
                    self.fanout.emit(sandbox_event(snap))
                    heard.add(sandbox_id)  # a sandbox's first container listed speaks for it
            self.looks.look(entry.id, sandbox_id, count, message.subscription)
        self.fanout.serve()

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel the lists and what they started (their event subscription ended); the tasks, to wait for."""
        tasks = list(self._work)
        for task in tasks:
            task.cancel()
        self._work.clear()
        self._listing = False
        self._heard = None
        return tasks

    def _keep(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    async def _forget(self, sandbox_id: str, asked: int) -> None:
        try:
            deleted = await asyncio.shield(self.sandboxes.forget(sandbox_id))
        except (PodmanUnavailable, PodmanError, PodmanUnreadable, DriverError) as exc:  # the next resync asks again
            log.warning("watch: could not check sandbox %s: %s", sandbox_id, exc)
            return
        self.inbox.put(Observed("", sandbox_id, None, deleted, asked))

    async def _collect(self) -> None:
        try:
            await self.sandboxes.collect_garbage()
        except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
            log.warning("watch: garbage collection failed: %s", exc)
