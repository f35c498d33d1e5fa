"""Plain words for a client that cannot reach podmand (``ctl`` and ``health``).

gRPC reports a missing socket, a stale one and Podman's HTTP/1.1 socket all as
UNAVAILABLE with transport text; this looks at the path itself and says which.
"""

from __future__ import annotations

import os
import socket
import stat

START_HINT = "start it with 'podmand serve', or point --socket / OPENSHELL_COMPUTE_DRIVER_SOCKET at its socket"


def _speaks_http1(path: str) -> bool:
    """Whether the socket answers an HTTP/1.1 request (Podman's API does; podmand's gRPC does not)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(path)
            s.sendall(b"GET /_ping HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n")
            return s.recv(16).startswith(b"HTTP/1.")
    except OSError:
        return False


def explain(path: str, details: str) -> str | None:
    """A one-line explanation of why ``path`` is not a usable podmand socket, or
    None when the failure is not about reaching it (then the gRPC text stands)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"no podmand is listening on {path} (it does not exist: {START_HINT})"
    except PermissionError:
        return f"cannot reach {path}: permission denied (run as podmand's user, or one it allows)"
    except OSError as exc:
        return f"cannot reach {path}: {exc.strerror}"
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket (is it podmand's driver socket? {START_HINT})"
    lowered = details.lower()
    if "failed parsing http/2" in lowered or "http1" in lowered:
        if _speaks_http1(path):
            return f"{path} is not a podmand driver socket (it speaks HTTP/1.1: Podman's API socket?)"
        return f"{path} is not a podmand driver socket (it does not speak gRPC)"
    if "connection refused" in lowered:
        return f"no podmand is listening on {path} (connection refused: a leftover socket; {START_HINT})"
    if "permission denied" in lowered:
        return f"cannot connect to {path}: permission denied (run as podmand's user, or one it allows)"
    return None


def message(path: str, code: str, details: str) -> str:
    """What a client prints for a failed call: the explanation when the socket
    could not be reached, else ``CODE: details``."""
    if code == "UNAVAILABLE":
        friendly = explain(path, details)
        if friendly is not None:
            return friendly
    return f"{code}: {details}"
