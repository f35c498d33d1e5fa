"""One Podman event subscription feeding every WatchSandboxes stream.

A single hub task serialises everything streams see: Podman events, the driver's
own publications and new subscribers, in one order. It never waits for Podman:
what would (the subscription, inspects, lists) runs in tasks that answer through
the inbox, and the hub composes their owners:

- ``subscription``: Podman's event stream, proved to deliver, and the resync ticker;
- ``looks``: the inspects in flight, one per container, ordered against the driver's word;
- ``lists``: the list on connecting (streams are served from it at once, and the looks
  it starts refine what they were told) and each resync's, which finds what events missed;
- ``fanout``: the streams, and what each sandbox was last told in (a new stream gets
  that at once, with no Podman call).

When Podman's stream breaks, every open stream ends UNAVAILABLE (the gateway
reconnects and gets a fresh snapshot) and the hub resubscribes, with backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import grpc

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..driver.observer import changes_state, supervisor_change
from ..errors import Unavailable
from ..libpod import BadEvent, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable
from .fanout import Fanout
from .inbox import Inbox, Listed, Lost, Message, Observed, PodmanEvent, Publish, Refresh, Resync, Subscribe, Unreadable
from .lists import Listing, Lists
from .looks import Looks
from .streams import Stream, key
from .subscription import Subscriber

log = logging.getLogger("podmand.watch.hub")

# Podman's events of a create and start podmand made itself: one that happened before the
# driver asked its look after that start (refresh(started=True), stamped by the inbox) shows
# a state older than the look reads, so it costs no inspect; an event after it (an
# out-of-band restart) is looked at as ever.
MADE = frozenset({"create", "init", "start"})


class Sandboxes(Listing, Protocol):
    """What the hub needs of the driver: the event path, never the RPCs."""

    def creating(self, sandbox_id: str) -> bool: ...

    def unwatched(self) -> None: ...

    def workload_of(self, sandbox_id: str) -> str | None: ...


class Hub:
    def __init__(
        self,
        podman: PodmanClient,
        sandboxes: Sandboxes,
        inbox: Inbox,
        *,
        buffer: int = 1024,
        resync: float = 30.0,
        prove: Callable[[], Awaitable[None]] | None = None,
        silent_resync: float = 0.0,
    ) -> None:
        self.sandboxes = sandboxes
        self.inbox = inbox
        self.buffer = buffer
        self.connected = asyncio.Event()  # streams are served (the first list after connecting is back)
        self.subscriber = Subscriber(podman, inbox, resync=resync, prove=prove, silent_resync=silent_resync)
        self.fanout = Fanout(self.connected, sandboxes.pending)
        self.looks = Looks(sandboxes, inbox)
        self.lists = Lists(sandboxes, inbox, self.looks, self.fanout)
        self._closed = False
        self._unreadable: set[str] = set()  # containers whose unreadable events were logged
        self._down = False  # the last subscription attempt failed (its loss is logged once)
        self._backoff = 0.25  # seconds before the next subscription attempt
        self.failure = ""  # why the last subscription ended or could not be made
        # Told when the event subscription opens (True) or is lost or cannot be made (False).
        self.link: Callable[[bool], None] = lambda _up: None
        self._count = 0  # messages handled: orders looks against what the driver says
        self._subscription = 0  # counts event subscriptions: answers to an ended one are ignored

    # ------------------------------------------------------------ public

    async def subscribe(self, timeout: float = 5.0) -> Stream:
        if self._closed:
            raise Unavailable("podmand is shutting down")
        try:
            await asyncio.wait_for(self.connected.wait(), timeout)
        except TimeoutError as exc:
            raise Unavailable("podmand is not connected to Podman's event stream") from exc
        stream = Stream(self.buffer)
        self.inbox.put(Subscribe(stream))
        return stream

    def unsubscribe(self, stream: Stream) -> None:
        self.fanout.streams.discard(stream)

    def close(self) -> None:
        self._closed = True
        self.fanout.end_all(grpc.StatusCode.UNAVAILABLE, "podmand is shutting down")

    async def run(self) -> None:
        """Subscribe to Podman events forever, with backoff between attempts."""
        while not self._closed:
            try:
                await self._subscribed()
            except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
                reason = str(exc)
            else:
                reason = "Podman's event stream ended"
            self.failure = reason
            self.connected.clear()
            self.sandboxes.unwatched()
            if self._closed:
                return
            self.link(False)
            if not self._down:
                log.warning("lost Podman's event stream (%s); ending %d watch stream(s)", reason,
                            len(self.fanout.streams))
            else:
                log.debug("Podman's event stream is still unavailable (%s)", reason)
            self._down = True
            self.fanout.end_all(grpc.StatusCode.UNAVAILABLE, f"Podman event stream lost: {reason}")
            await asyncio.sleep(self._backoff)
            self._backoff = min(self._backoff * 2, 5.0)

    async def _subscribed(self) -> None:
        """One subscription, from its request to its end: connected with a first list, then
        every message handled until the subscription ends."""
        try:
            async with self.subscriber.subscribed(self._subscription):
                self._down = False
                self._backoff = 0.25
                self.link(True)
                self._list(first=True)
                await self._process()
        finally:
            await self._stop_work()

    # ------------------------------------------------------------ internals

    async def _stop_work(self) -> None:
        """Cancel looks, lists and garbage collection of a subscription that ended."""
        self._subscription += 1
        tasks = [*self.looks.cancel(), *self.lists.cancel()]
        await asyncio.gather(*tasks, return_exceptions=True)
        self.fanout.forget()  # the next subscription tells everything afresh

    async def _process(self) -> None:
        while True:
            message = await self.inbox.get()
            if isinstance(message, Lost):
                if message.subscription not in (-1, self._subscription):
                    continue  # the end of a subscription that has ended already
                if message.error is not None:
                    raise message.error
                return
            try:
                self._handle(message)
            except Exception:  # one bad item must not stop every watch stream
                log.exception("watch: failed to handle %s", type(message).__name__)

    def _handle(self, message: Message) -> None:
        self._count += 1
        match message:
            case Subscribe(stream):
                if self._closed:
                    stream.close(grpc.StatusCode.UNAVAILABLE, "podmand is shutting down")
                else:
                    self.fanout.add(stream)
            case Publish(event):
                said = key(event)[0]
                if said:
                    self.looks.said(said, self._count)
                self._emit(event)
            case Refresh(container_id, sandbox_id):
                self._look(container_id, sandbox_id)
            case Observed():
                self._observed(message)
            case Resync():
                self._list(first=False)
            case Listed():
                if message.subscription == self._subscription:
                    self.lists.listed(message, self._count)
            case Unreadable(bad):
                self._unreadable_event(bad)
            case PodmanEvent(event) if changes_state(event):
                sandbox_id = (event.Actor.attributes or {})[names.SANDBOX_ID]
                if event.Action in ("create", "init") and self.sandboxes.creating(sandbox_id):
                    return  # podmand is making it: provisioning asks for a look once it started
                if event.Action in MADE and 0 < event.timeNano <= self.inbox.started_at(event.Actor.id):
                    if event.Action == "start":
                        self.inbox.seen_start(event.Actor.id)
                    return  # before provisioning asked its look after the start: that look reads newer
                self._look(event.Actor.id, sandbox_id, removed=event.Action == "remove")
            case PodmanEvent(event) if sandbox_id := supervisor_change(event):
                workload = self.sandboxes.workload_of(sandbox_id)  # its snapshot folds the supervisor in
                if workload is not None:
                    self._look(workload, sandbox_id)

    def _look(self, container_id: str, sandbox_id: str, *, removed: bool = False) -> None:
        self.looks.look(container_id, sandbox_id, self._count, self._subscription, removed=removed)

    def _list(self, *, first: bool) -> None:
        self.lists.ask(first=first, subscription=self._subscription)

    def _observed(self, message: Observed) -> None:
        if message.subscription not in (-1, self._subscription) and not message.deleted:
            return  # a look of an ended subscription (a Deleted stays true: it is sent)
        event = self.looks.answered(message, self._count, self._subscription)
        if event is not None:
            self._emit(event)

    def _emit(self, event: pb.WatchSandboxesEvent) -> None:
        """Tell the streams; a first list out since before this is not to roll it back."""
        said = key(event)[0]
        if said:
            self.lists.heard(said)
        self.fanout.emit(event)

    def _unreadable_event(self, bad: BadEvent) -> None:
        """A skipped event still meant a change: a resync finds it (one bad
        event, e.g. from a huge tenant label, must not end every stream)."""
        who = bad.container_id or "unknown container"
        if who not in self._unreadable:
            if len(self._unreadable) >= 1024:
                self._unreadable.clear()
            self._unreadable.add(who)
            log.warning("watch: skipped an unreadable Podman event of %s (%s); resyncing", who, bad.reason)
        else:
            log.debug("watch: skipped another unreadable event of %s", who)
        self._list(first=False)
