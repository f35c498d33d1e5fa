"""systemd readiness (``sd_notify``): one datagram to ``$NOTIFY_SOCKET``.

A ``Type=notify`` unit counts podmand as started only once it says ``READY=1``
(after its socket answers), so units ordered after it start when it serves.
The protocol is a newline-separated ``KEY=value`` datagram on a Unix socket, a
leading ``@`` naming an abstract address; without ``$NOTIFY_SOCKET`` (not run by
systemd) nothing is sent.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import MutableMapping

log = logging.getLogger("podmand")


class Notifier:
    def __init__(self, address: str) -> None:
        self.address = address

    @classmethod
    def from_environ(cls, environ: MutableMapping[str, str]) -> Notifier:
        """Take ``NOTIFY_SOCKET`` out of the environment, as sd_notify's unset_environment
        does: children (a Podman service podmand starts) must not speak for podmand."""
        return cls(environ.pop("NOTIFY_SOCKET", ""))

    def send(self, *fields: str) -> bool:
        """Send ``fields`` (``READY=1``, ``STATUS=...``) as one datagram; False when not
        asked to notify or the send failed (logged: readiness is a courtesy, not a reason to stop)."""
        if not self.address:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(1.0)
                sock.connect(target)
                sock.sendall("\n".join(fields).encode())
        except OSError as exc:
            log.warning("cannot notify systemd at NOTIFY_SOCKET=%s: %s", self.address, exc.strerror or exc)
            return False
        return True
