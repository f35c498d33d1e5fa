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

import grpc

from . import names
from ._proto import compute_driver_pb2 as pb
from .driver import Driver, deleted_event, sandbox_event
from .errors import Unavailable
from .libpod import BadEvent, Event, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable

log = logging.getLogger("podmand.hub")

# libpod says "died" for a natural exit ("die" only on the Docker-compat API).
STATE_ACTIONS = frozenset(
    {
        "create",
        "init",
        "start",
        "restart",
        "died",
        "die",
        "cleanup",
        "kill",
        "stop",
        "pause",
        "unpause",
        "health_status",
        "remove",
        "oom",
    }
)


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


class Hub:
    def __init__(self, podman: PodmanClient, driver: Driver, *, buffer: int = 1024, resync: float = 30.0) -> None:
        self.podman = podman
        self.driver = driver
        self.buffer = buffer
        self.resync = resync
        self.connected = asyncio.Event()
        self._inbox: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
        self._streams: set[Stream] = set()
        self._closed = False
        self._unreadable: set[str] = set()  # containers whose unreadable events were logged
        self._down = False  # the last subscription attempt failed (its loss is logged once)
        # Told when the event subscription opens (True) or is lost or cannot be made (False).
        self.link: Callable[[bool], None] = lambda _up: None
        driver.publish = lambda event: self._inbox.put_nowait(("publish", event))
        driver.refresh = lambda container_id, sandbox_id: self._inbox.put_nowait(
            ("refresh", (container_id, sandbox_id))
        )

    # ------------------------------------------------------------ public

    async def subscribe(self, timeout: float = 5.0) -> Stream:
        if self._closed:
            raise Unavailable("podmand is shutting down")
        try:
            await asyncio.wait_for(self.connected.wait(), timeout)
        except TimeoutError as exc:
            raise Unavailable("podmand is not connected to Podman's event stream") from exc
        stream = Stream(self.buffer)
        self._inbox.put_nowait(("subscribe", stream))
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
            self._inbox.put_nowait(("resync", None))

    async def _pump(self, events: object) -> None:
        try:
            async for event in events:  # type: ignore[attr-defined]
                self._inbox.put_nowait(("unreadable" if isinstance(event, BadEvent) else "event", event))
        except (PodmanUnavailable, PodmanError, PodmanUnreadable) as exc:
            self._inbox.put_nowait(("lost", exc))
        else:
            self._inbox.put_nowait(("lost", None))

    async def _process(self) -> None:
        while True:
            kind, item = await self._inbox.get()
            if kind == "lost":
                if isinstance(item, Exception):
                    raise item
                return
            try:
                await self._handle(kind, item)
            except PodmanUnavailable:
                raise
            except PodmanError as exc:
                log.warning("watch: Podman error while handling %s: %s", kind, exc)
            except Exception:  # one bad item must not stop every watch stream
                log.exception("watch: failed to handle %s", kind)

    async def _handle(self, kind: str, item: object) -> None:
        if kind == "subscribe":
            assert isinstance(item, Stream)
            if self._closed:
                item.close(grpc.StatusCode.UNAVAILABLE, "podmand is shutting down")
                return
            try:
                snaps = await self.driver.snapshot_all()
            except BaseException as exc:
                # A stream whose snapshot failed must not wait forever for one.
                item.close(grpc.StatusCode.UNAVAILABLE, f"snapshot failed: {exc}")
                raise
            for snap in snaps:
                item.put(sandbox_event(snap))
            self._streams.add(item)
        elif kind == "publish":
            assert isinstance(item, pb.WatchSandboxesEvent)
            self._emit(item)
        elif kind == "refresh":
            assert isinstance(item, tuple)
            await self._observe(*item)
        elif kind == "resync":
            await self._resync()
        elif kind == "unreadable":
            assert isinstance(item, BadEvent)
            await self._unreadable_event(item)
        elif kind == "event":
            assert isinstance(item, Event)
            attrs = item.Actor.attributes or {}
            sandbox_id = attrs.get(names.SANDBOX_ID, "")
            if sandbox_id and attrs.get(names.OWNER) == names.OWNER_VALUE and item.Action in STATE_ACTIONS:
                await self._observe(item.Actor.id, sandbox_id)

    async def _observe(self, container_id: str, sandbox_id: str) -> None:
        snap = await self.driver.observe(container_id)
        if snap is not None:
            self._emit(sandbox_event(snap))
        elif sandbox_id and await self.driver.forget(sandbox_id):
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

    async def _resync(self) -> None:
        snaps = await self.driver.snapshot_all()
        for snap in snaps:
            self._emit(sandbox_event(snap))
        present = {s.id for s in snaps}
        told = {sid for stream in self._streams for sid, value in stream.seen.items() if value != b"deleted"}
        for sandbox_id in sorted(told - present):
            if await self.driver.forget(sandbox_id):
                self._emit(deleted_event(sandbox_id))
        await self.driver.collect_garbage()

    def _emit(self, event: pb.WatchSandboxesEvent) -> None:
        for stream in list(self._streams):
            stream.put(event)
            if stream.end is not None:
                self._streams.discard(stream)
