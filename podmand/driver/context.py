"""What each part of a create, a stop, a start and a delete is given: Podman, the settings,
the state directory and its files, and the event sink. Its own module because every one
of those parts imports it, and it imports none of them.

The driver makes one :class:`Context`; each part keeps beside it only what is its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import Settings
from ..libpod import PodmanClient
from ..sandbox.files import SandboxFiles
from .events import EventSink


@dataclass(frozen=True)
class Context:
    podman: PodmanClient
    settings: Settings
    state_dir: Path
    files: SandboxFiles  # the sandboxes' files in the state directory
    sink: EventSink  # what the watch streams are told through
