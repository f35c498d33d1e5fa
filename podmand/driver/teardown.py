"""A sandbox container's stop or removal that Podman failed in its network teardown
(netavark: ``PodmanError.network_teardown``): asked again a bounded number of times,
then answered ``UNAVAILABLE`` with one line naming the sandbox and quoting Podman.

Its own module because StopSandbox (startstop.py) and DeleteSandbox (removal.py) must
treat it alike. Rootless Podman 5.4.2 fails the teardown this way when containers of
one network are torn down together (bench/scale.py's parallel deletes; a stop while
another container exited); it has stopped or removed the container all the same, and
forgotten its network, so asking again answers at once (304 for the stop, 404 for the
removal) and the RPC succeeds. A Podman that still fails after the attempts gets
``UNAVAILABLE``, not ``INTERNAL``: the environment is at fault, not podmand, and the same
request may succeed later (the gateway keeps the sandbox: a failed delete restores its
state, and is sent again). Nothing is left half done: the stop marker is taken back;
the delete stops before the volume and the state files, which a later delete removes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import Unavailable
from ..libpod import PodmanError

log = logging.getLogger("podmand.driver")

T = TypeVar("T")

ATTEMPTS = 3  # the first call and two more
PAUSE = 0.2  # seconds before each further attempt, doubled each time


async def retried(sandbox_id: str, what: str, call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` (``what``: "stopping" or "removing"), asked again while Podman says its
    network teardown failed; ``Unavailable`` naming the sandbox once it failed ``ATTEMPTS``
    times. Any other error passes through unchanged."""
    pause = PAUSE
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await call()
        except PodmanError as exc:
            if not exc.network_teardown:
                raise
            said = " ".join(exc.message.split())  # netavark lists several errors on lines of their own
            if attempt == ATTEMPTS:
                raise Unavailable(
                    f"sandbox {sandbox_id}: {what} its container failed {ATTEMPTS} times in Podman's network "
                    f"teardown (netavark); try again: {said}"
                ) from exc
            log.warning("sandbox %s: Podman's network teardown (netavark) failed %s its container, asking again: %s",
                        sandbox_id, what, said)
            await asyncio.sleep(pause)
            pause *= 2
    raise AssertionError("unreachable")  # pragma: no cover
