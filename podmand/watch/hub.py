"""One Podman event subscription feeding every WatchSandboxes stream.

A single hub task serialises everything streams see: Podman events, the
driver's own publications and new subscribers, in one order.  It never waits
for Podman.  Looking at a container (an inspect) runs in a task of its own,
one at a time per container (a change during a look asks for one more look,
so bursts of events cost one or two inspects), and its result comes back
through the inbox; a result overtaken by a Deleted is dropped.  A new stream
gets what the hub last told about every sandbox, at once, with no Podman call.

Each time the event subscription opens, one list teaches the driver's index
every container and each is looked at once; streams are served when that is
done.  Every ``resync`` seconds one more list (in a task) finds what events
missed: a state the hub did not see, a container gone, garbage.  When Podman's
stream breaks, every open stream ends UNAVAILABLE (the gateway reconnects and
gets a fresh snapshot) and the hub resubscribes.

Podman may accept a subscription and say nothing (eventproof.py), so each one is
proved with an event podmand causes: any event arriving proves it.  Podman 5.1-5.2
answers the request only with that first event, so the subscription is served once
Podman answers or, when the proof gives up first, without the answer (events flow
if it ever comes).  While no proof has arrived the stream is *silent*: one warning
says why and how to fix it, and resyncs run every ``silent_resync`` seconds, so
exits not seen through conmon's exit files are found within that; the first event
heard ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import grpc

from .. import names
from .._proto import compute_driver_pb2 as pb
from ..driver.events import deleted_event, sandbox_event
from ..driver.observer import changes_state
from ..errors import Unavailable
from ..host import eventproof
from ..host.eventproof import Proof
from ..libpod import BadEvent, ContainerListEntry, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable
from .inbox import Inbox, Listed, Lost, Message, Observed, PodmanEvent, Publish, Refresh, Resync, Subscribe, Unreadable
from .streams import Stream, key

log = logging.getLogger("podmand.watch.hub")

# Inspects the hub runs at once: enough to look at 500 containers in well under a
# second, few enough to leave the libpod pool to the RPCs.
LOOKS = 4
# Seconds new streams wait for the first looks after connecting: a container whose
# inspect hangs (Podman holds its lock) must not keep every stream, and start-up, waiting.
FIRST_LOOKS = 5.0


class Sandboxes(Protocol):
    """What the hub needs of the driver: the event path, never the RPCs."""

    async def listed(self) -> list[ContainerListEntry]: ...

    async def observe(self, container_id: str) -> pb.DriverSandbox | None: ...

    async def forget(self, sandbox_id: str, container_id: str = "") -> bool: ...

    async def collect_garbage(self) -> list[str]: ...

    def pending(self, besides: set[str]) -> list[pb.DriverSandbox]: ...

    def creating(self, sandbox_id: str) -> bool: ...

    def changed(self, entry: ContainerListEntry) -> bool: ...

    def unwatched(self) -> None: ...


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
        self.podman = podman
        self.sandboxes = sandboxes
        self.inbox = inbox
        self.buffer = buffer
        self.resync = resync
        # Causes one event the subscription matches (eventproof.cause); None: the stream is trusted.
        self.prove = prove
        self.silent_resync = silent_resync  # seconds between resyncs while silent; 0: ``resync``
        self.event_logger = ""  # Podman's events_logger, named when the stream is silent (from /info)
        self.silent = False  # no event arrived to prove the last subscription live
        self._silence_told = False  # the one warning about it was logged
        self._ticker: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self._streams: set[Stream] = set()
        self._closed = False
        self._unreadable: set[str] = set()  # containers whose unreadable events were logged
        self._down = False  # the last subscription attempt failed (its loss is logged once)
        self._backoff = 0.25  # seconds before the next subscription attempt
        self.failure = ""  # why the last subscription ended or could not be made
        # Told when the event subscription opens (True) or is lost or cannot be made (False).
        self.link: Callable[[bool], None] = lambda _up: None
        self._told: dict[str, pb.DriverSandbox] = {}  # sandbox id -> the last snapshot streams were sent
        self._count = 0  # messages handled: orders looks against what the driver says
        # Sandbox id -> message count of the driver's last word on it (a snapshot it
        # published, or Deleted): a look asked for before that is out of date.
        self._said_at: dict[str, int] = {}
        self._waiting: list[Stream] = []  # subscribed while the first looks were still out
        self._looking: dict[str, asyncio.Task[None]] = {}  # container id -> its look in flight
        self._again: dict[str, tuple[str, bool]] = {}  # looks asked for while one was in flight
        self._first: set[str] | None = None  # first looks still out after connecting
        self._first_due: asyncio.TimerHandle | None = None
        self._work: set[asyncio.Task[None]] = set()  # lists and garbage collection
        self._listing = False
        self._looks = asyncio.Semaphore(LOOKS)
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
        self._streams.discard(stream)

    def close(self) -> None:
        self._closed = True
        self._end_all(grpc.StatusCode.UNAVAILABLE, "podmand is shutting down")

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
                log.warning("lost Podman's event stream (%s); ending %d watch stream(s)", reason, len(self._streams))
            else:
                log.debug("Podman's event stream is still unavailable (%s)", reason)
            self._down = True
            self._end_all(grpc.StatusCode.UNAVAILABLE, f"Podman event stream lost: {reason}")
            await asyncio.sleep(self._backoff)
            self._backoff = min(self._backoff * 2, 5.0)

    async def _subscribed(self) -> None:
        """One subscription, from its request to its end; served once Podman answers it or,
        when the proof gives up first (Podman 5.1-5.2 on a silent stream), without the answer."""
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        proof = Proof()
        pump = asyncio.create_task(self._pump(opened, proof))
        proving = asyncio.create_task(self._prove(proof, opened)) if self.prove is not None else None
        try:
            await asyncio.wait([t for t in (opened, pump, proving) if t is not None],
                               return_when=asyncio.FIRST_COMPLETED)
            if opened.done():
                opened.result()  # raises what kept Podman from answering
                log.debug("subscribed to Podman events")
            elif pump.done():
                pump.result()  # a crash of the pump itself: the hub's
            else:
                log.debug("Podman has not answered the event subscription; serving without it until it does")
            self._down = False
            self._backoff = 0.25
            self.link(True)
            self._ticker = asyncio.create_task(self._tick())
            self._list(first=True)
            await self._process()
        finally:
            proof.stop()
            tasks = [t for t in (pump, proving, self._ticker) if t is not None]
            self._ticker = None
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if opened.done():
                opened.exception()  # retrieved: raised above, or moot
            await self._stop_work()

    # ------------------------------------------------------------ internals

    def _end_all(self, code: grpc.StatusCode, message: str) -> None:
        for stream in [*self._streams, *self._waiting]:
            stream.close(code, message)
        self._streams.clear()
        self._waiting.clear()

    async def _stop_work(self) -> None:
        """Cancel looks, lists and garbage collection of a subscription that ended."""
        self._subscription += 1
        tasks = [*self._looking.values(), *self._work]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._looking.clear()
        self._again.clear()
        self._work.clear()
        self._listing = False
        self._first = None
        if self._first_due is not None:
            self._first_due.cancel()
            self._first_due = None
        self._told.clear()  # the next subscription tells everything afresh
        self._said_at.clear()

    def _interval(self, silent: bool) -> float:
        return eventproof.silent_interval(self.resync, self.silent_resync) if silent else self.resync

    async def _tick(self) -> None:
        """The safety net: periodically compare Podman with what streams were told."""
        interval = self._interval(self.silent)
        if not interval:
            return
        while True:
            await asyncio.sleep(interval)
            self.inbox.put(Resync())

    async def _pump(self, opened: asyncio.Future[None], proof: Proof) -> None:
        """Open the subscription (``opened`` says when, or why not) and pass on what it sends.
        Its end reaches the inbox too: the hub may be serving without waiting for ``opened``."""
        subscription = self._subscription
        try:
            async with self.podman.events([f"{names.OWNER}={names.OWNER_VALUE}"]) as events:
                opened.set_result(None)
                async for event in events:
                    proof.heard()
                    self._heard()
                    self.inbox.put(Unreadable(event) if isinstance(event, BadEvent) else PodmanEvent(event))
        except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
            if not opened.done():
                opened.set_exception(exc)
            self.inbox.put(Lost(exc, subscription))
        else:
            self.inbox.put(Lost(None, subscription))

    async def _prove(self, proof: Proof, opened: asyncio.Future[None]) -> None:
        """Cause events until one arrives; when none does, the stream is silent (said once)."""
        assert self.prove is not None
        if await proof.run(self.prove):
            log.debug("Podman's event stream delivers events")
            return
        if proof.stopped:  # the subscription ended first: it proves nothing
            return
        said = eventproof.silent(self.event_logger, proof.error)
        if not opened.done():
            said += " (Podman has not even answered the subscription: 5.1 to 5.2 answer only with an event)"
        if self._silence_told:
            log.debug("Podman's event stream is still silent: %s", said)
        else:
            self._silence_told = True
            every = self._interval(True)
            log.warning(
                "%s. Until an event arrives, exits are taken from conmon's exit files where podmand sees them and "
                "from %s. Fix: %s",
                said,
                f"a resync every {every:g} s" if every else "no resync (resync_interval and its _silent are 0)",
                eventproof.fix(eventproof.this_user()),
            )
        self._set_silent(True)

    def _heard(self) -> None:
        if self.silent:
            log.info("Podman's event stream delivers events now; resyncs %s again",
                     f"every {self.resync:g} s" if self.resync else "off")
            self._set_silent(False)

    def _set_silent(self, silent: bool) -> None:
        """While silent, resyncs come every ``silent_resync`` seconds: the ticker starts afresh."""
        if silent == self.silent:
            return
        self.silent = silent
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = asyncio.create_task(self._tick())

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
                self._subscribe(stream)
            case Publish(event):
                said = key(event)[0]
                if said:
                    self._said_at[said] = self._count
                self._emit(event)
            case Refresh(container_id, sandbox_id):
                self._look(container_id, sandbox_id)
            case Observed():
                self._observed(message)
            case Resync():
                self._list(first=False)
            case Listed():
                self._listed(message)
            case Unreadable(bad):
                self._unreadable_event(bad)
            case PodmanEvent(event) if changes_state(event):
                sandbox_id = (event.Actor.attributes or {})[names.SANDBOX_ID]
                if event.Action in ("create", "init") and self.sandboxes.creating(sandbox_id):
                    return  # podmand is making it: provisioning asks for a look once it started
                self._look(event.Actor.id, sandbox_id, removed=event.Action == "remove")

    def _subscribe(self, stream: Stream) -> None:
        """Everything the hub last told, and what is still provisioning: no Podman call."""
        if self._closed:
            stream.close(grpc.StatusCode.UNAVAILABLE, "podmand is shutting down")
            return
        if not self.connected.is_set():  # reconnected meanwhile: served once every container was looked at
            self._waiting.append(stream)
            return
        for snap in [*self._told.values(), *self.sandboxes.pending(besides=set(self._told))]:
            stream.put(sandbox_event(snap))
        self._streams.add(stream)

    # ------------------------------------------------------------ looking at containers

    def _look(self, container_id: str, sandbox_id: str, *, removed: bool = False) -> None:
        """Look at a container (in a task); one look at a time per container."""
        if container_id in self._looking:
            before = self._again.get(container_id)
            self._again[container_id] = (sandbox_id or (before[0] if before else ""), removed)
            return
        looker = self._looker(container_id, sandbox_id, removed, self._count, self._subscription)
        self._looking[container_id] = self._spawn(looker)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro)

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
        except (PodmanError, PodmanUnreadable) as exc:
            log.warning("watch: Podman error while looking at %s: %s", container_id[:12], exc)
        except Exception:
            log.exception("watch: failed to look at container %s", container_id[:12])
        self.inbox.put(Observed(container_id, sandbox_id, snap, deleted, asked, subscription))

    def _observed(self, message: Observed) -> None:
        if message.subscription not in (-1, self._subscription) and not message.deleted:
            return  # a look of an ended subscription (a Deleted stays true: it is sent)
        container_id, sandbox_id = message.container_id, message.sandbox_id
        self._looking.pop(container_id, None)
        if message.snap is not None:
            if self._said_at.get(message.snap.id, -1) <= message.asked:  # not overtaken by the driver's word
                self._emit(sandbox_event(message.snap))
        elif message.deleted:
            self._said_at[sandbox_id] = self._count
            self._emit(deleted_event(sandbox_id))
        again = self._again.pop(container_id, None)
        if again is not None:
            self._look(container_id, again[0] or sandbox_id, removed=again[1])
        if self._first is not None:
            self._first.discard(container_id)
            self._served_if_ready()
        if not self._looking:
            self._said_at.clear()  # no look left that the driver's word could overtake

    # ------------------------------------------------------------ lists: connecting, resync, GC

    def _list(self, *, first: bool) -> None:
        """One list of every managed container, in a task (at most one at a time)."""
        if self._listing:
            return
        self._listing = True
        told, subscription = frozenset(self._told), self._subscription

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

    def _keep(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self._spawn(coro)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    def _listed(self, message: Listed) -> None:
        if message.subscription != self._subscription:
            return
        self._listing = False
        present: set[str] = set()
        for entry in message.entries:
            sandbox_id = (entry.labels or {}).get(names.SANDBOX_ID, "")
            if not sandbox_id:
                continue
            present.add(sandbox_id)
            if message.first or self.sandboxes.changed(entry):
                self._look(entry.id, sandbox_id)
        if message.first:
            self._first = set(self._looking)
            self._first_due = asyncio.get_running_loop().call_later(FIRST_LOOKS, self._serve_anyway)
            self._served_if_ready()
            return
        pending = {s.id for s in self.sandboxes.pending(besides=set())}
        for sandbox_id in sorted(message.told - present - pending):
            if sandbox_id in self._told:  # not deleted since: gone out of band, or missed
                self._keep(self._forget(sandbox_id))
        self._keep(self._collect())

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
            self.connected.set()
            waiting, self._waiting = self._waiting, []
            for stream in waiting:
                self._subscribe(stream)

    async def _forget(self, sandbox_id: str) -> None:
        try:
            deleted = await asyncio.shield(self.sandboxes.forget(sandbox_id))
        except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
            log.warning("watch: could not check sandbox %s: %s", sandbox_id, exc)
            return
        self.inbox.put(Observed("", sandbox_id, None, deleted, self._count))

    async def _collect(self) -> None:
        try:
            await self.sandboxes.collect_garbage()
        except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
            log.warning("watch: garbage collection failed: %s", exc)

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

    def _emit(self, event: pb.WatchSandboxesEvent) -> None:
        kind = event.WhichOneof("payload")
        if kind == "sandbox":
            self._told[event.sandbox.sandbox.id] = event.sandbox.sandbox
        elif kind == "deleted":
            self._told.pop(event.deleted.sandbox_id, None)
        for stream in list(self._streams):
            stream.put(event)
            if stream.end is not None:
                self._streams.discard(stream)
