"""One Podman event subscription feeding every WatchSandboxes stream.

A single hub task serialises everything that changes what streams see: Podman
events, the driver's own publications and new subscribers.  A new stream gets
its full snapshot computed inside that task, so no live change can be ordered
before it.  When Podman's stream breaks, every open stream ends UNAVAILABLE
(the gateway reconnects and gets a fresh snapshot) and the hub resubscribes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import grpc

from . import names
from ._proto import compute_driver_pb2 as pb
from .driver.events import deleted_event, sandbox_event
from .driver.observer import changes_state
from .errors import Unavailable
from .libpod import BadEvent, Event, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable

log = logging.getLogger("podmand.hub")


class Sandboxes(Protocol):
    """What the hub needs of the driver: the event path, never the RPCs."""

    async def snapshot_all(self) -> list[pb.DriverSandbox]: ...

    async def observe(self, container_id: str) -> pb.DriverSandbox | None: ...

    async def forget(self, sandbox_id: str) -> bool: ...

    async def collect_garbage(self) -> list[str]: ...


@dataclass(frozen=True)
class End:
    code: grpc.StatusCode
    message: str


def _key(event: pb.WatchSandboxesEvent) -> tuple[str, bytes]:
    """(sandbox id, state) for deduplication; ('', b'') for platform events."""
    kind = event.WhichOneof("payload")
    if kind == "sandbox":
        return event.sandbox.sandbox.id, event.sandbox.sandbox.SerializeToString(deterministic=True)
    if kind == "deleted":
        return event.deleted.sandbox_id, b"deleted"
    return "", b""


class Stream:
    """A bounded per-client buffer; overflow ends this stream alone.

    Each stream remembers what it last told its client about each sandbox and
    drops repeats, so a change is never lost to another stream's history."""

    def __init__(self, limit: int) -> None:
        self._items: collections.deque[pb.WatchSandboxesEvent] = collections.deque()
        self._limit = limit
        self._wake = asyncio.Event()
        self.seen: dict[str, bytes] = {}
        self.end: End | None = None

    def put(self, event: pb.WatchSandboxesEvent) -> None:
        if self.end is not None:
            return
        key, value = _key(event)
        if key:
            if self.seen.get(key) == value:
                return
            self.seen[key] = value
        if len(self._items) >= self._limit:
            self.close(grpc.StatusCode.RESOURCE_EXHAUSTED, "watch stream consumer fell behind; reconnect")
            return
        self._items.append(event)
        self._wake.set()

    def close(self, code: grpc.StatusCode, message: str) -> None:
        if self.end is None:
            self.end = End(code, message)
            self._items.clear()
            self._wake.set()

    async def get(self) -> pb.WatchSandboxesEvent | End:
        while not self._items:
            if self.end is not None:
                return self.end
            self._wake.clear()
            await self._wake.wait()
        return self._items.popleft()


# ------------------------------------------------------------ the inbox and its messages


@dataclass(frozen=True)
class Publish:
    """The driver's own event, for every stream."""

    event: pb.WatchSandboxesEvent


@dataclass(frozen=True)
class Refresh:
    """Look at a container again (the driver changed it, or its exit waiter answered)."""

    container_id: str
    sandbox_id: str


@dataclass(frozen=True)
class Subscribe:
    stream: Stream


@dataclass(frozen=True)
class Resync:
    """Compare Podman with what every stream was told."""


@dataclass(frozen=True)
class Look:
    """Observe every sandbox once (on connecting): containers running since before get
    their exit waiters, whether or not anyone watches."""


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


Message = Publish | Refresh | Subscribe | Resync | Look | PodmanEvent | Unreadable | Lost


class Inbox:
    """Everything the hub task handles, in order.  Made before the driver and the
    hub, it is the driver's event sink and the hub's input."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Message] = asyncio.Queue()

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

    def refresh(self, container_id: str, sandbox_id: str) -> None:
        self.put(Refresh(container_id, sandbox_id))


class Hub:
    def __init__(
        self, podman: PodmanClient, sandboxes: Sandboxes, inbox: Inbox, *, buffer: int = 1024, resync: float = 30.0
    ) -> None:
        self.podman = podman
        self.sandboxes = sandboxes
        self.inbox = inbox
        self.buffer = buffer
        self.resync = resync
        self.connected = asyncio.Event()
        self._streams: set[Stream] = set()
        self._closed = False
        self._unreadable: set[str] = set()  # containers whose unreadable events were logged
        self._down = False  # the last subscription attempt failed (its loss is logged once)
        # Told when the event subscription opens (True) or is lost or cannot be made (False).
        self.link: Callable[[bool], None] = lambda _up: None

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
        delay = 0.25
        while not self._closed:
            try:
                async with self.podman.events([f"{names.MANAGED}=true"]) as events:
                    log.debug("subscribed to Podman events")
                    self.connected.set()
                    self._down = False
                    self.link(True)
                    delay = 0.25
                    self.inbox.put(Look())
                    pump = asyncio.create_task(self._pump(events))
                    ticker = asyncio.create_task(self._tick())
                    try:
                        await self._process()
                    finally:
                        pump.cancel()
                        ticker.cancel()
            except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
                reason = str(exc)
            else:
                reason = "Podman's event stream ended"
            self.connected.clear()
            if self._closed:
                return
            self.link(False)
            if not self._down:
                log.warning("lost Podman's event stream (%s); ending %d watch stream(s)", reason, len(self._streams))
            else:
                log.debug("Podman's event stream is still unavailable (%s)", reason)
            self._down = True
            self._end_all(grpc.StatusCode.UNAVAILABLE, f"Podman event stream lost: {reason}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    # ------------------------------------------------------------ internals

    def _end_all(self, code: grpc.StatusCode, message: str) -> None:
        for stream in list(self._streams):
            stream.close(code, message)
        self._streams.clear()

    async def _tick(self) -> None:
        """The safety net: periodically compare Podman with what streams were told."""
        if not self.resync:
            return
        while True:
            await asyncio.sleep(self.resync)
            self.inbox.put(Resync())

    async def _pump(self, events: object) -> None:
        try:
            async for event in events:  # type: ignore[attr-defined]
                self.inbox.put(Unreadable(event) if isinstance(event, BadEvent) else PodmanEvent(event))
        except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
            self.inbox.put(Lost(exc))
        else:
            self.inbox.put(Lost(None))

    async def _process(self) -> None:
        while True:
            message = await self.inbox.get()
            if isinstance(message, Lost):
                if message.error is not None:
                    raise message.error
                return
            try:
                await self._handle(message)
            except PodmanUnavailable:
                raise
            except PodmanError as exc:
                log.warning("watch: Podman error while handling %s: %s", type(message).__name__, exc)
            except Exception:  # one bad item must not stop every watch stream
                log.exception("watch: failed to handle %s", type(message).__name__)

    async def _handle(self, message: Message) -> None:
        match message:
            case Subscribe(stream):
                await self._subscribe(stream)
            case Publish(event):
                self._emit(event)
            case Refresh(container_id, sandbox_id):
                await self._observe(container_id, sandbox_id)
            case Resync():
                await self._resync()
            case Look():
                await self._look()
            case Unreadable(bad):
                await self._unreadable_event(bad)
            case PodmanEvent(event) if changes_state(event):
                await self._observe(event.Actor.id, (event.Actor.attributes or {})[names.SANDBOX_ID])

    async def _subscribe(self, stream: Stream) -> None:
        if self._closed:
            stream.close(grpc.StatusCode.UNAVAILABLE, "podmand is shutting down")
            return
        try:
            snaps = await self.sandboxes.snapshot_all()
        except BaseException as exc:
            # A stream whose snapshot failed must not wait forever for one.
            stream.close(grpc.StatusCode.UNAVAILABLE, f"snapshot failed: {exc}")
            raise
        for snap in snaps:
            stream.put(sandbox_event(snap))
        self._streams.add(stream)

    async def _observe(self, container_id: str, sandbox_id: str) -> None:
        snap = await self.sandboxes.observe(container_id)
        if snap is not None:
            self._emit(sandbox_event(snap))
        elif sandbox_id and await self.sandboxes.forget(sandbox_id):
            self._emit(deleted_event(sandbox_id))

    async def _unreadable_event(self, bad: BadEvent) -> None:
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
        await self._resync()

    async def _look(self) -> list[pb.DriverSandbox]:
        snaps = await self.sandboxes.snapshot_all()
        for snap in snaps:
            self._emit(sandbox_event(snap))
        return snaps

    async def _resync(self) -> None:
        snaps = await self._look()
        present = {s.id for s in snaps}
        told = {sid for stream in self._streams for sid, value in stream.seen.items() if value != b"deleted"}
        for sandbox_id in sorted(told - present):
            if await self.sandboxes.forget(sandbox_id):
                self._emit(deleted_event(sandbox_id))
        await self.sandboxes.collect_garbage()

    def _emit(self, event: pb.WatchSandboxesEvent) -> None:
        for stream in list(self._streams):
            stream.put(event)
            if stream.end is not None:
                self._streams.discard(stream)
