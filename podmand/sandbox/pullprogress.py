"""Pull progress from libpod's ``/images/pull`` stream, as platform-event metadata.

Podman 4.3.1 sends text lines, never byte counts: ``Copying blob sha256:…`` when a
layer starts (``… done`` or ``… skipped: already exists`` on versions that say so),
``Copying config …`` once every layer is in, then ``Writing manifest``. So progress
is counted in blobs seen and blobs done; ``bytes_done``/``bytes_total`` keys are
only set when a line states sizes (``12.3MiB / 45.6MiB``), which 4.3.1 never does.

Events are rate-limited: one per completed blob, otherwise at most one per
``interval`` seconds, plus a heartbeat (see :data:`HEARTBEAT`) while a pull is
silent, so a client waiting on the stream can tell a slow pull from a stuck one.

A pull silent for ``pull_inactivity_timeout`` seconds is abandoned (:class:`Inactivity`):
a registry that accepts and never answers must not hang a create forever. Closing
the stream is what stops it: libpod cancels a pull whose client went away.

Podman 6 holds a pull's answer, head and lines alike, until the first blob moves or
``maximalStreamingDelay`` (5 s) has passed, so that a pull failing early can still be
answered with an error status (pkg/api/handlers/libpod/images_pull.go:27,181-241 at
v6.0.0-rc1; 5.8 answers 200 at once). Those seconds are Podman's silence, not the
registry's: before the first line the allowance is at least :data:`HEAD_HOLD`, whatever
a shorter ``pull_inactivity_timeout`` says; after it the setting alone counts.
"""

from __future__ import annotations

import re

from .. import names

REASON = "Pulling"
HEARTBEAT = 10.0  # seconds without a line before "still pulling" is published again
HEAD_HOLD = 6.0  # Podman 6's 5 s hold of a pull's first line, and a second for the way there and back
KEY_IMAGE = "io.podmand.pull.image"
KEY_BLOBS_DONE = "io.podmand.pull.blobs_done"
KEY_BLOBS_SEEN = "io.podmand.pull.blobs_seen"
KEY_BYTES_DONE = "io.podmand.pull.bytes_done"
KEY_BYTES_TOTAL = "io.podmand.pull.bytes_total"
KEY_ELAPSED = "io.podmand.pull.elapsed"

_BLOB = re.compile(r"Copying blob (?:sha256:)?([0-9a-f]{6,64})(.*)")
_SIZES = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\s*/\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)", re.ASCII)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


SETTING = "pull_inactivity_timeout"


class PullStalled(Exception):
    """Podman sent nothing for the whole inactivity timeout."""


class Inactivity:
    """When a pull has been silent too long; pure (time is passed in). A timeout of 0 never
    fires. ``first``: the least silence allowed before the first line (:data:`HEAD_HOLD`)."""

    def __init__(self, timeout: float, now: float, first: float = 0.0) -> None:
        self.timeout = timeout
        self.first = first
        self.last = now
        self.heard = False

    def touch(self, now: float) -> None:
        self.last = now
        self.heard = True

    def allowed(self) -> float:
        """The silence allowed from the last line (or the start) on."""
        return self.timeout if self.heard else max(self.timeout, self.first)

    def remaining(self, now: float) -> float | None:
        """Seconds left before the pull is abandoned (None: never)."""
        return None if self.timeout <= 0 else self.last + self.allowed() - now

    def expired(self, now: float) -> bool:
        left = self.remaining(now)
        return left is not None and left <= 0

    def message(self, image: str) -> str:
        return f"no progress from Podman for {self.allowed():g} s pulling {image!r} ({SETTING})"


def _bytes(number: str, unit: str) -> int:
    return int(float(number) * _UNITS[unit.upper()])


class PullProgress:
    """What one pull has done so far, fed line by line; pure (time is passed in)."""

    def __init__(self, image: str, started: float, interval: float = 0.5) -> None:
        self.image = image
        self.started = started
        self.interval = interval
        self.seen: dict[str, bool] = {}  # blob -> done
        self.sizes: dict[str, tuple[int, int]] = {}
        self._last_emit: float | None = None

    @property
    def done(self) -> int:
        return sum(self.seen.values())

    def feed(self, text: str, now: float) -> dict[str, str] | None:
        """Take one stream line; the event metadata to publish now, or None."""
        completed = False
        for line in text.splitlines():
            completed |= self._line(line.strip())
        due = self._last_emit is None or now - self._last_emit >= self.interval
        if not self.seen or not (completed or due):
            return None
        return self._emit(now)

    def heartbeat(self, now: float) -> dict[str, str]:
        """The metadata of a "still pulling" event (the stream was silent)."""
        return self._emit(now)

    def _line(self, line: str) -> bool:
        blob = _BLOB.match(line)
        if blob is not None:
            digest, rest = blob.group(1)[:12], blob.group(2)
            sizes = _SIZES.search(rest)
            if sizes is not None:
                self.sizes[digest] = (_bytes(*sizes.group(1, 2)), _bytes(*sizes.group(3, 4)))
            finished = any(word in rest for word in ("done", "skipped", "already exists"))
            was = self.seen.get(digest, False)
            self.seen[digest] = was or finished
            return finished and not was
        if line.startswith(("Copying config", "Writing manifest")):
            newly = [d for d, fin in self.seen.items() if not fin]
            for digest in newly:
                self.seen[digest] = True
            return bool(newly)
        return False

    def _emit(self, now: float) -> dict[str, str]:
        self._last_emit = now
        meta = {
            names.PROGRESS_ACTIVE_STEP: names.STEP_PULLING,
            names.PROGRESS_ACTIVE_DETAIL: self.detail(),
            KEY_IMAGE: self.image,
            KEY_BLOBS_DONE: str(self.done),
            KEY_BLOBS_SEEN: str(len(self.seen)),
            KEY_ELAPSED: f"{max(0.0, now - self.started):.0f}",
        }
        if self.sizes and len(self.sizes) == len(self.seen):
            meta[KEY_BYTES_DONE] = str(sum(d for d, _ in self.sizes.values()))
            meta[KEY_BYTES_TOTAL] = str(sum(t for _, t in self.sizes.values()))
        return meta

    def detail(self) -> str:
        if not self.seen:
            return f"{self.image}: starting"
        return f"{self.image}: {self.done} of {len(self.seen)} layers"

    def message(self) -> str:
        return f"Pulling image {self.detail()}"
