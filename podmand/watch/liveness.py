"""Whether Podman is reachable, and what the gRPC health service says about it.

The hub's event subscription is podmand's heartbeat with Podman: it is open
while Podman answers and is re-made with backoff when it breaks. Health stays
SERVING through a short outage (a Podman restart) and turns NOT_SERVING once
the subscription has been down for ``podman_down_grace`` seconds, so a
sidecar's HEALTHCHECK or a supervisor sees a driver that cannot do anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("podmand")


class Liveness:
    """Fed by the hub (``up``/``down``); ``run`` publishes the serving status."""

    def __init__(self, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self._clock = clock
        self._lost_at: float | None = None
        self._changed = asyncio.Event()

    def up(self) -> None:
        """Podman answers again (the event subscription is open)."""
        if self._lost_at is None:
            return
        log.info("Podman is reachable again after %.0f s", self._clock() - self._lost_at)
        self._lost_at = None
        self._changed.set()

    def down(self) -> None:
        """The event subscription is lost or cannot be made; repeats are ignored."""
        if self._lost_at is None:
            self._lost_at = self._clock()
            self._changed.set()

    def serving(self) -> bool:
        return self._lost_at is None or self._clock() - self._lost_at < self.grace

    async def run(self, publish: Callable[[bool], Awaitable[None]]) -> None:
        """Call ``publish`` with each change of the serving status (it starts as serving)."""
        current = True
        while True:
            self._changed.clear()
            wanted = self.serving()
            if wanted != current:
                current = wanted
                if not wanted:
                    log.warning(
                        "Podman has been unreachable for %g s (podman_down_grace): health is NOT_SERVING "
                        "until it is back",
                        self.grace,
                    )
                await publish(wanted)
            if self._lost_at is None or not current:
                await self._changed.wait()
            else:  # the grace period is running: wake at its end, or on a change
                left = self._lost_at + self.grace - self._clock()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), max(left, 0.0))
