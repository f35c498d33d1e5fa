"""What the libpod client raises: nothing else leaves the package.

Three outcomes a caller tells apart: Podman said no (:class:`PodmanError`), Podman
could not be reached or the exchange broke (:class:`PodmanUnavailable`: worth a retry
once it is back), and Podman answered in a shape podmand cannot read
(:class:`PodmanUnreadable`: a bug on one side or not a libpod socket, never retried
as if it were an outage).  OS, asyncio and msgspec errors are mapped to these inside
the package.
"""

from __future__ import annotations


class PodmanError(Exception):
    """Podman answered with a non-2xx status (or a failed pull or event stream, reported in-band)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"podman API error ({status}): {message}")
        self.status = status
        self.message = message

    @property
    def gone(self) -> bool:
        """The object does not exist: Podman says 404, or 500 with "no such ..."
        (removing a container or volume someone else removed a moment ago)."""
        said = self.message.lower()
        return self.status == 404 or any(f"no such {what}" in said for what in ("container", "volume", "network"))


class PodmanUnavailable(Exception):
    """The Podman socket could not be reached, the connection broke, or Podman did
    not answer in time."""


class PodmanUnreadable(Exception):
    """Podman answered, but not in the shape libpod answers (undecodable JSON, wrong
    types, a wait result that is no number)."""
