"""WatchSandboxes streams as bench/scale.py reads them: each event stamped with this
host's clock on arrival, and waits on conditions with a deadline (never a sleep)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from podmand._proto import compute_driver_pb2 as pb
from podmand._proto import compute_driver_pb2_grpc as pb_grpc


def is_ready(box: pb.DriverSandbox) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in box.status.conditions)


@dataclass
class Watch:
    """One long-lived stream: per sandbox, when it was last seen Ready, when it last
    went from Ready to not Ready, and when it was deleted (``time.time()``)."""

    stub: pb_grpc.ComputeDriverStub
    ready: dict[str, float] = field(default_factory=dict)
    down: dict[str, float] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _task: asyncio.Task[None] | None = None

    def start(self) -> Watch:
        self._task = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        call = self.stub.WatchSandboxes(pb.WatchSandboxesRequest())
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            async for event in call:
                now = time.time()
                kind = event.WhichOneof("payload")
                if kind == "sandbox":
                    box = event.sandbox.sandbox
                    if is_ready(box):
                        self.ready[box.id] = now
                        self.down.pop(box.id, None)
                    elif box.id in self.ready:
                        self.ready.pop(box.id)
                        self.down[box.id] = now
                elif kind == "deleted":
                    self.deleted[event.deleted.sandbox_id] = now
                    self.ready.pop(event.deleted.sandbox_id, None)
                async with self._changed:
                    self._changed.notify_all()
        call.cancel()

    async def until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(check), timeout)
            except TimeoutError:
                raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}") from None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def snapshot_time(
    stub: pb_grpc.ComputeDriverStub, n: int, timeout: float = 300, first: asyncio.Event | None = None
) -> float:
    """Seconds from opening a new stream until it has sent a snapshot of ``n`` distinct
    sandboxes (the snapshot is every sandbox, so the n-th is the last); ``first`` is set
    when its first sandbox arrives (the snapshot is under way)."""
    seen: set[str] = set()
    start = time.perf_counter()
    call = stub.WatchSandboxes(pb.WatchSandboxesRequest())

    async def read() -> float:
        async for event in call:
            if event.WhichOneof("payload") == "sandbox":
                seen.add(event.sandbox.sandbox.id)
                if first is not None:
                    first.set()
                if len(seen) >= n:
                    return time.perf_counter() - start
        raise SystemExit(f"the watch stream ended after {len(seen)} of {n} snapshots")

    try:
        return await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        raise SystemExit(f"a new stream's snapshot had {len(seen)} of {n} sandboxes after {timeout:.0f} s") from None
    finally:
        call.cancel()
