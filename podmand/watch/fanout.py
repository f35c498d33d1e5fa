"""Who hears the hub: the open watch streams, and the snapshot each sandbox was last told
in. Its own module because telling does not depend on how the hub learns anything:
Podman's events, looks and lists reach it only as an event to send.

The hub decides what is true; this module tells it, to the streams being served and,
once the first list after connecting is back, to those that subscribed meanwhile. A
new stream gets the last snapshot of every sandbox at once, with no Podman call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from .._proto import compute_driver_pb2 as pb
from ..driver.events import sandbox_event
from .streams import Stream


class Fanout:
    """The streams the hub serves; ``connected`` is set while they are served."""

    def __init__(self, connected: asyncio.Event, pending: Callable[[set[str]], list[pb.DriverSandbox]]) -> None:
        self.connected = connected
        self._pending = pending  # snapshots of sandboxes with no container (yet), but those given
        self.streams: set[Stream] = set()
        self.waiting: list[Stream] = []  # subscribed while the first list was still out
        self.told: dict[str, pb.DriverSandbox] = {}  # sandbox id -> the last snapshot streams were sent

    def add(self, stream: Stream) -> None:
        """Everything the hub last told, and what is still provisioning: no Podman call."""
        if not self.connected.is_set():  # (re)connecting: served once the first list is back
            self.waiting.append(stream)
            return
        for snap in [*self.told.values(), *self._pending(set(self.told))]:
            stream.put(sandbox_event(snap))
        self.streams.add(stream)

    def serve(self) -> None:
        """The first list is back: streams are served, those waiting first."""
        self.connected.set()
        waiting, self.waiting = self.waiting, []
        for stream in waiting:
            self.add(stream)

    def emit(self, event: pb.WatchSandboxesEvent) -> None:
        kind = event.WhichOneof("payload")
        if kind == "sandbox":
            self.told[event.sandbox.sandbox.id] = event.sandbox.sandbox
        elif kind == "deleted":
            self.told.pop(event.deleted.sandbox_id, None)
        for stream in list(self.streams):
            stream.put(event)
            if stream.end is not None:
                self.streams.discard(stream)

    def end_all(self, code: grpc.StatusCode, message: str) -> None:
        for stream in [*self.streams, *self.waiting]:
            stream.close(code, message)
        self.streams.clear()
        self.waiting.clear()
