"""Proof that Podman's event stream delivers: an event podmand causes itself.

Podman can accept an event subscription and then say nothing. 5.1.0 to 5.2.x send
even the answer's head only with the first event that matches (containers/podman#23712,
fixed in 5.3.0), so on an idle host the subscription never opens; an event logger
the user cannot read (journald without access to the journal, containers/podman#26910)
sends no event and no error. podmand does not guess from Podman's version:
after subscribing it causes an event the subscription matches, and any event arriving
proves the stream live. The event is a container created, never started, and removed
at once: its root is an empty directory of its own in the state directory (which Podman
is checked to see at the same path), so no image is needed and nothing is mounted;
podmand's own labels (names.own_labels) keep the hub from acting on it, and its name
is an image reader's, so garbage collection removes one a killed podmand left behind.

Which events arrive, and what is done when none does, is the caller's (the hub,
``podmand doctor``); this module owns the event, the attempts and the words.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .. import names
from ..libpod import PodmanClient, PodmanError, PodmanUnavailable, PodmanUnreadable
from ..sandbox import imagefiles

PREFIX = f"{imagefiles.READER_PREFIX}events-"
# Seconds for the proof to arrive before podmand says the stream is silent: Podman's
# file event logger is read by polling, a quarter of a second behind.
DEADLINE = 5.0
# Seconds one caused event is waited for before another is caused: one made before
# Podman started reading its event log for this subscription is never sent.
ATTEMPT = 1.0
JOURNAL_ISSUE = "https://github.com/containers/podman/issues/26910"


def spec(name: str, root: Path, state_dir: Path) -> dict[str, Any]:
    """A container that is never started: rooted in an empty directory, no network."""
    return {
        "name": name,
        "rootfs": str(root),
        "entrypoint": ["/nonexistent"],
        "command": [],
        "labels": names.own_labels(str(state_dir)),
        "netns": {"nsmode": "none"},
    }


async def cause(podman: PodmanClient, state_dir: Path) -> None:
    """One container ``create`` and ``remove`` event: the container and its root directory
    are gone again when this returns, however it ends (Podman's refusal is raised)."""
    token = uuid.uuid4().hex[:12]
    name, root = f"{PREFIX}{token}", state_dir / f".event-proof-{token}"
    root.mkdir(mode=0o700)
    imagefiles.ACTIVE.add(name)  # not garbage while it exists
    created = asyncio.ensure_future(podman.create_container(spec(name, root, state_dir)))
    try:
        await asyncio.shield(created)
    finally:
        try:  # after the create's answer, even when the caller gives up (cancels): imagefiles.dispose
            await imagefiles.dispose(podman, name, created)
        finally:
            with contextlib.suppress(OSError):
                root.rmdir()


class Proof:
    """One subscription's proof: :meth:`heard` is told of every event it delivers, :meth:`stop`
    when the subscription ends."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.stopped = False
        self.error = ""  # why the last event could not be caused
        self._wake = asyncio.Event()

    def heard(self) -> None:
        self.arrived.set()
        self._wake.set()

    def stop(self) -> None:
        """No more attempts. Said besides cancelling the run: on Python 3.11 an inner
        ``wait_for`` that finishes as the cancellation comes swallows it (gh-86296)."""
        self.stopped = True
        self._wake.set()

    async def run(
        self, caused: Callable[[], Awaitable[None]], deadline: float = DEADLINE, attempt: float = ATTEMPT
    ) -> bool:
        """Cause an event (again every ``attempt`` seconds) until one arrives: True, or False
        when none has within ``deadline`` seconds (or the proof was stopped first)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while not self.arrived.is_set() and not self.stopped:
            left = end - loop.time()
            if left <= 0:
                break
            try:
                async with asyncio.timeout(left):
                    await caused()
                self.error = ""
            except TimeoutError:
                self.error = f"Podman did not create and remove a container within {deadline:.0f} s"
            except (PodmanError, PodmanUnavailable, PodmanUnreadable, OSError) as exc:
                self.error = str(exc)
            left = end - loop.time()
            if left > 0 and not self.stopped:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(attempt, left)):
                        await self._wake.wait()
        return self.arrived.is_set()


def silent_interval(resync: float, silent_resync: float) -> float:
    """Seconds between resyncs while the stream is silent: ``silent_resync``, never slower
    than ``resync`` (0 for either: the other)."""
    if not silent_resync:
        return resync
    return min(silent_resync, resync) if resync else silent_resync


def silent(logger: str, error: str, deadline: float = DEADLINE) -> str:
    """What a silent event stream means (``logger``: Podman's events_logger, "" when unknown)."""
    if error:
        return (
            f"podmand could not prove Podman's event stream live: the container it creates and removes to "
            f"cause an event could not be made ({error}), and no event arrived within {deadline:.0f} s"
        )
    said = f" (Podman's event logger: {logger})" if logger else ""
    return (
        f"Podman's event stream is silent{said}: the container podmand created and removed to cause an event "
        f"produced none within {deadline:.0f} s. Usually the journald event logger with a journal this user "
        f"cannot read ({JOURNAL_ISSUE})"
    )


def this_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def fix(user: str) -> str:
    return (
        'set events_logger = "file" in the [engine] table of containers.conf (rootless: '
        "~/.config/containers/containers.conf of the Podman user) and restart Podman's service; or let the user "
        f"read the journal: as root, usermod -aG systemd-journal {user}, then restart the user's session and "
        "Podman's service"
    )
