"""What ``socket`` and ``state_dir`` default to: worked out once, at load.

The driver socket sits beside Podman's own sockets, in the runtime directory Podman
picks (``rundir``); the state directory follows the XDG base directory rules.
"""

from __future__ import annotations

import os

from .rundir import resolve


def default_state_dir() -> str:
    if os.geteuid() == 0:
        return "/var/lib/podmand"
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "podmand")


def default_socket() -> str:
    if os.geteuid() == 0:
        return "/run/podmand/compute-driver.sock"
    # Beside Podman's own sockets, in the directory Podman picks (a /tmp fallback without logind).
    return os.path.join(resolve().path, "podmand", "compute-driver.sock")


def driver_socket(explicit: str | None) -> str:
    """The driver socket a client should use: flag, then the server's own setting, then the default."""
    path = (explicit or os.environ.get("OPENSHELL_COMPUTE_DRIVER_SOCKET") or default_socket()).removeprefix("unix://")
    return os.path.abspath(path)  # gRPC reads unix://rel.sock as a host name
