"""One subscription to Podman's event stream at a time: the pump into the inbox, the proof
that it delivers, and the resync ticker whose pace silence sets. Its own module because
none of it touches a stream or a container: all it learns reaches the hub as a message.

Podman may accept a subscription and say nothing (eventproof.py), so each one is
proved with an event podmand causes: any event arriving proves it. Podman 5.1-5.2
answers the request only with that first event, so the subscription is served once
Podman answers or, when the proof gives up first, without the answer (events flow
if it ever comes). While no proof has arrived the stream is *silent*: one warning
says why and how to fix it, and resyncs run every ``silent_resync`` seconds, so
exits not seen through conmon's exit files are found within that; the first event
heard ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from .. import names
from ..host import eventproof
from ..host.eventproof import Proof
from ..libpod import BadEvent, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable
from .inbox import Inbox, Lost, PodmanEvent, Resync, Unreadable

log = logging.getLogger("podmand.watch.hub")


class Subscriber:
    """Subscribes to podmand's own containers' events, one subscription at a time."""

    def __init__(
        self,
        podman: PodmanClient,
        inbox: Inbox,
        *,
        resync: float,
        prove: Callable[[], Awaitable[None]] | None,
        silent_resync: float,
    ) -> None:
        self.podman = podman
        self.inbox = inbox
        self.resync = resync
        # Causes one event the subscription matches (eventproof.cause); None: the stream is trusted.
        self.prove = prove
        self.silent_resync = silent_resync  # seconds between resyncs while silent; 0: ``resync``
        self.event_logger = ""  # Podman's events_logger, named when the stream is silent (from /info)
        self.silent = False  # no event arrived to prove the last subscription live
        self._silence_told = False  # the one warning about it was logged
        self._ticker: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def subscribed(self, subscription: int) -> AsyncIterator[None]:
        """Subscription number ``subscription``, from its request to its end: the block runs
        once Podman answers it or, when the proof gives up first (Podman 5.1-5.2 on a silent
        stream), without the answer; what kept Podman from answering is raised instead."""
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        proof = Proof()
        pump = asyncio.create_task(self._pump(opened, proof, subscription))
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
            self._ticker = asyncio.create_task(self._tick())
            yield
        finally:
            proof.stop()
            tasks = [t for t in (pump, proving, self._ticker) if t is not None]
            self._ticker = None
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if opened.done():
                opened.exception()  # retrieved: raised above, or moot

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

    async def _pump(self, opened: asyncio.Future[None], proof: Proof, subscription: int) -> None:
        """Open the subscription (``opened`` says when, or why not) and pass on what it sends.
        Its end reaches the inbox too: the hub may be serving without waiting for ``opened``."""
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
