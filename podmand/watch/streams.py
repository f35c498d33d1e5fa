"""One watch stream's buffer: bounded, deduplicated per client, ended with a status.

The hub puts events on it; the servicer takes them off for its client.  What a
client was last told of each sandbox is remembered here, per stream, so that a
repeat is dropped without hiding a change from a stream that never saw it. What a
stream holds is references: the fanout hands every stream the same event object and
the same key bytes (computed once per event, not once per stream).
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass

import grpc

from .._proto import compute_driver_pb2 as pb


@dataclass(frozen=True)
class End:
    code: grpc.StatusCode
    message: str


def key(event: pb.WatchSandboxesEvent) -> tuple[str, bytes]:
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

    def put(self, event: pb.WatchSandboxesEvent, said: tuple[str, bytes] | None = None) -> None:
        """Queue ``event`` unless it repeats what this client was last told; ``said`` is
        its ``key`` when the caller has it already (shared by every stream it is put on)."""
        if self.end is not None:
            return
        sandbox_id, value = key(event) if said is None else said
        if sandbox_id:
            if self.seen.get(sandbox_id) == value:
                return
            self.seen[sandbox_id] = value
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
