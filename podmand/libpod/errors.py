"""What the libpod client raises: nothing else leaves the package.

Three outcomes a caller tells apart: Podman said no (:class:`PodmanError`), Podman
could not be reached or the exchange broke (:class:`PodmanUnavailable`: worth a retry
once it is back), and Podman answered in a shape podmand cannot read
(:class:`PodmanUnreadable`: a bug on one side or not a libpod socket, never retried
as if it were an outage).  OS, asyncio and msgspec errors are mapped to these inside
the package.
"""

from __future__ import annotations

import re

# How Podman words a container's network teardown that netavark failed: Container.cleanup
# wraps cleanupNetwork's error as "removing container <id> network: " (libpod/container_internal.go
# at v5.4.2), around containers/common's netavarkError, "netavark[ (exit code N)]: <netavark's
# error>" (libnetwork/netavark/exec.go at v0.62.3). A stop's cleanup answers it as is, a remove
# prefixes "cleaning up container <id>: " (libpod/runtime_ctr.go).
_NETWORK_TEARDOWN = re.compile(r"removing container [0-9a-f]{12,64} network: netavark\b")


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

    @property
    def network_teardown(self) -> bool:
        """A stop or remove whose network teardown netavark failed (500): rootless Podman
        5.4.2 answers "... removing container <id> network: netavark: failed to delete
        container veth eth0: Netlink error: No such device (os error 19)" (or "failed to
        get bridge interface: ...") when containers of one network are torn down together.
        Podman forgets the container's network all the same (cleanupNetwork clears and
        saves it whatever netavark said, and frees its addresses), and goes on: the stop
        has stopped the container, the remove has removed it; asked again, it answers 304
        and 404."""
        return self.status == 500 and _NETWORK_TEARDOWN.search(self.message) is not None


class PodmanUnavailable(Exception):
    """The Podman socket could not be reached, the connection broke, or Podman did
    not answer in time."""


class PodmanUnreadable(Exception):
    """Podman answered, but not in the shape libpod answers (undecodable JSON, wrong
    types, a wait result that is no number)."""
