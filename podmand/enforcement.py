"""Whether Podman applies CPU and memory limits, known before its ``/info`` answers.

GetCapabilities advertises it, and the driver socket accepts while ``/info`` (0.15 s
on Podman 4.3) is still on its way. Podman drops the limits only when it is rootless
on cgroup v1, so local facts often prove the answer: a unified cgroup v2 hierarchy
here (a container sees its host's version), or a Podman that is root in podmand's own
user namespace, where that namespace is the host's. Otherwise GetCapabilities waits
for ``/info``, which has the last word either way.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from .libpod import Info

CGROUP2_MARKER = "/sys/fs/cgroup/cgroup.controllers"  # only the unified hierarchy has it at the root
FULL_MAP = ("0", "0", "4294967295")  # the initial user namespace's uid_map


def from_info(info: Info) -> bool:
    return not (info.host.security.rootless and info.host.cgroupVersion == "v1")


def predict(*, cgroup2: bool, podman_uid: int | None, host_namespace: bool) -> bool | None:
    """The answer when the facts prove it; None when only ``/info`` can tell."""
    if cgroup2 or (podman_uid == 0 and host_namespace):
        return True
    return None


def socket_owner(path: str) -> int | None:
    """The uid of the process listening on ``path`` (as this user namespace sees it)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect(path)
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    uid: int = struct.unpack("3i", creds)[1]
    return uid


def in_host_namespace(uid_map: str) -> bool:
    """``/proc/self/uid_map`` maps every uid to itself: podmand is not in a container's user namespace."""
    return [line.split() for line in uid_map.splitlines()] == [list(FULL_MAP)]


def predicted(podman_socket: str) -> bool | None:
    """``predict`` from this host's facts about the Podman behind ``podman_socket``."""
    try:
        uid_map = Path("/proc/self/uid_map").read_text()
    except OSError:
        uid_map = ""
    return predict(
        cgroup2=Path(CGROUP2_MARKER).exists(),
        podman_uid=socket_owner(podman_socket),
        host_namespace=in_host_namespace(uid_map),
    )
