"""Image references pinned to what Podman said of them, until Podman says otherwise.

A create needs the image's ID, user and environment: once podmand has pulled or
inspected a reference, asking again is a call whose answer it already knows, as
long as nothing moved the tag or removed the image.  Podman's image events say
when that happens; while podmand is not subscribed to them, nothing is known and
every reference is looked up as before.

Podman writes a ``pull`` event for every pull that succeeds, even one the ``missing``
policy made a no-op (seen on 4.3.1, without the image's ID, and on 5.4.2, with it). Read
as any other pull, podmand's own would forget the pin it was made for, and every create
would pull and inspect again. So a pull podmand makes is expected (:meth:`own_pull`):
the first ``pull`` event of that name after it started is taken as its own and forgets
nothing. A pull that fails is expected no more; an expected event that has not come
``OWN_PULL_WINDOW`` seconds after the pull returned is expected no more either, so a
Podman that wrote none cannot hide another pull's event for longer than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterator

from ..libpod import BadEvent, Event, ImageInspect, PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable
from .tasks import Tasks

log = logging.getLogger("podmand.driver")

KEY = "image-events"  # the subscription's task, in the driver's Tasks
# References remembered, least recently used forgotten first: callers choose them, and
# each holds the image's config (environment, labels) until an event drops it.
KEPT = 512
# Actions that neither move a name nor remove an image ("pull-error", Podman 5's event
# for a pull that failed, included).
_KEEP = frozenset({"mount", "unmount", "push", "save", "exists", "cleanup", "pull-error"})
# Seconds an own pull's event is still expected after the pull returned (Podman has
# written it by then: it is read within about a second).
OWN_PULL_WINDOW = 60.0


def name_key(ref: str) -> str:
    """The last path part of a reference with its tag (``latest`` when none) or digest:
    one key for every spelling of a name (``alpine``, ``docker.io/library/alpine:latest``),
    shared at worst with the same name in other registries (then more is forgotten, never less)."""
    last = ref.rsplit("/", 1)[-1]
    if "@" in last or ":" in last:
        return last
    return f"{last}:latest"


def _bare(image_id: str) -> str:
    return image_id.removeprefix("sha256:")


class Images:
    """reference -> ImageInspect for the references podmand pulled or inspected."""

    def __init__(
        self, podman: PodmanClient, tasks: Tasks, retry: float = 0.5, kept: int = KEPT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.podman = podman
        self.clock = clock
        self.tasks = tasks
        self.retry = retry  # seconds before resubscribing, doubled up to 30 while it fails
        self.kept = kept
        self._known: OrderedDict[str, ImageInspect] = OrderedDict()
        self.live = False  # subscribed to Podman's image events
        # Bumped by what may change any name (a removal, an unreadable event, losing the
        # stream), and per name: a lookup that raced one of them is not remembered.
        self._epoch = 0
        self._changes: Counter[str] = Counter()
        # name key -> the own pulls whose event is still to come, each with a deadline
        # (monotonic; infinite while the pull runs). At most ``kept`` in all.
        self._own: dict[str, list[list[float]]] = {}

    def __len__(self) -> int:
        return len(self._known)

    def known(self, ref: str) -> ImageInspect | None:
        """What ``ref`` was last seen to be, while nothing since says it moved."""
        self.tasks.ensure(KEY, self._watch)
        info = self._known.get(ref) if self.live else None
        if info is not None:
            self._known.move_to_end(ref)
        return info

    async def pinned(
        self, ref: str, fetch: Callable[[], Awaitable[ImageInspect]], *, reuse: bool = True
    ) -> ImageInspect:
        """``ref``'s image: as known when ``reuse`` allows, else ``fetch()`` (a pull, an
        inspect), whose answer is remembered unless an event for ``ref`` came meanwhile."""
        if reuse and (info := self.known(ref)) is not None:
            return info
        self.tasks.ensure(KEY, self._watch)
        mark = self._mark(ref) if self.live else None
        info = await fetch()
        if mark is not None and self.live and self._mark(ref) == mark and info.id:
            if ref not in self._known:
                log.debug("image %s pinned as %s until an image event moves it", ref, _bare(info.id)[:12])
            self._known[ref] = info
            self._known.move_to_end(ref)
            while len(self._known) > self.kept:
                self._known.popitem(last=False)
        return info

    @contextlib.contextmanager
    def own_pull(self, ref: str) -> Iterator[None]:
        """Around a pull of ``ref`` podmand makes: its ``pull`` event is expected (see the module)."""
        key = name_key(ref)
        expected = [math.inf]
        waiting = self._own.setdefault(key, [])
        waiting.append(expected)
        if sum(len(v) for v in self._own.values()) > self.kept:  # a flood of pulls: forget as before
            self._own.clear()
        try:
            yield
        except BaseException:
            self._unexpect(key, expected)
            raise
        expected[0] = self.clock() + OWN_PULL_WINDOW

    def _unexpect(self, key: str, expected: list[float]) -> None:
        waiting = self._own.get(key, [])
        with contextlib.suppress(ValueError):
            waiting.remove(expected)
        if not waiting:
            self._own.pop(key, None)

    def _own_event(self, key: str) -> bool:
        """A ``pull`` event of ``key``: podmand's own (expected, now no more)?"""
        now = self.clock()
        waiting = [e for e in self._own.get(key, []) if e[0] > now]
        if not waiting:
            self._own.pop(key, None)
            return False
        waiting.pop(0)
        if waiting:
            self._own[key] = waiting
        else:
            self._own.pop(key, None)
        return True

    def _mark(self, ref: str) -> tuple[int, int]:
        return self._epoch, self._changes[name_key(ref)]

    def forget(self, event: Event | BadEvent) -> None:
        """Drop what an image event may have made untrue."""
        if isinstance(event, BadEvent):  # cannot tell which: everything
            self._reset()
            return
        if event.Type != "image" or event.Action in _KEEP:
            return
        name = (event.Actor.attributes or {}).get("name", "")
        if event.Action == "pull" and name and self._own_event(name_key(name)):
            return  # podmand's own pull: what it pinned after that pull is still true
        image_id = _bare(event.Actor.id)
        if not name and not image_id:  # it names nothing: every name may have moved
            self._reset()
            return
        if image_id:  # any reference may be (or become) this image
            self._epoch += 1
        key = name_key(name) if name else None
        if key is not None:
            self._changes[key] += 1
        for ref, info in list(self._known.items()):
            if name_key(ref) == key or _bare(info.id) == image_id:
                del self._known[ref]
                log.debug("image %s: a %s event may have moved it; looked up again at its next use", ref, event.Action)

    def forget_all(self) -> None:
        """Podman refused what podmand remembered: look every reference up again."""
        self._reset()

    def _reset(self) -> None:
        self._epoch += 1
        self._known.clear()
        self._own.clear()  # an expected event may be lost with the stream: the next one forgets

    async def _watch(self) -> None:
        """Keep the subscription up; while it is down nothing is known."""
        delay = self.retry
        while True:
            try:
                async with self.podman.image_events() as events:
                    self.live = True
                    log.debug("image events: subscribed; images pulled or inspected from now on are pinned")
                    delay = self.retry
                    async for event in events:
                        self.forget(event)
                log.info("Podman ended the image event stream; images are looked up until it is back")
            except (PodmanError, PodmanUnavailable, PodmanUnreadable) as exc:
                log.warning("no image events from Podman (images are looked up until they are back): %s", exc)
            finally:
                self.live = False
                self._reset()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
