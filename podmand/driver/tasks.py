"""The owner of the driver's background tasks.

Every task the driver starts is spawned here, so shutdown can cancel them all;
a keyed task (one exit waiter per container) runs at most once at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any


class Tasks:
    def __init__(self) -> None:
        self._running: set[asyncio.Task[None]] = set()
        self._keyed: dict[Hashable, asyncio.Task[None]] = {}

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    def ensure(self, key: Hashable, start: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``start()`` under ``key`` unless a task of that key still runs."""
        if key in self._keyed:
            return
        task = self._keyed[key] = self.spawn(start())
        task.add_done_callback(lambda _t: self._keyed.pop(key, None))

    def __contains__(self, key: Hashable) -> bool:
        """Whether a task of ``key`` (:meth:`ensure`) still runs."""
        return key in self._keyed

    def __len__(self) -> int:
        return len(self._running)

    async def close(self) -> None:
        """Cancel every task and wait for them to end."""
        tasks = list(self._running)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` and wait for it to finish.  A cancellation of the caller
    itself still propagates (asyncio.wait never swallows it)."""
    if task is not None and not task.done():
        task.cancel()
        await asyncio.wait([task])
