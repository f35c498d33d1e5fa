"""Whether Podman applies CPU and memory limits: from its ``/info``, and before that
answers only from facts that prove it.

GetCapabilities advertises one ``limit_supported`` bit for CPU and one for memory, and
a bit is true only when Podman applies that limit. Podman does so when the cgroup
controller is available where it puts the container:

* rootless on cgroup v1, never: Podman drops every limit with a warning
  (pkg/specgen/generate/validate_linux.go:34-36 at v5.4.2);
* rootless with the ``cgroupfs`` manager (no systemd user session), never: the runtime
  gets no cgroup path at all (libpod/container_internal_linux.go:426-429 at v5.4.2),
  and Podman's own default pids limit is 0 there (containers/common
  pkg/config/default.go:637-648, vendored at v5.4.2);
* otherwise (rootless with systemd on cgroup v2, or rootful): when the controller is in
  ``host.cgroupControllers``, Podman's own reading of what is available to it (since
  Podman 3.3; libpod/info_linux.go:39-46 at v5.4.2). Rootless that is the
  ``cgroup.controllers`` of Podman's own cgroup, so what the user's systemd was told to
  delegate; rootful, the root cgroup's (v1: the mounted hierarchies). cgroup v2 alone
  proves nothing: without ``Delegate=cpu ...`` a user gets memory and pids only
  (containers/podman#14856, #22147).

Podman's list can fall short of what a container would get (containers/podman#11931:
read where systemd had not enabled the controllers yet): the bit is then false though a
limit might apply. podmand claims only what Podman shows, and asks Podman for no limit it would not apply
(``libpod.versions.applied_controllers``, ``sandbox.resources.applicable``): a runtime
given a limit whose controller is missing fails the start (Podman 6.1.1 on cgroup v2
without delegated controllers). Pids have no bit; ``podmand doctor``'s cgroups check says
whether ``pids_limit`` applies.

The driver socket accepts while ``/info`` is on its way, so GetCapabilities answers
before it when local facts prove the answer. They can only for a Podman that is root in
podmand's own user namespace, the host's: Podman then reads the kernel-wide list, and
podmand reads a list that is never longer. On cgroup v2 that is
``/sys/fs/cgroup/cgroup.controllers``, the root cgroup's for a podmand on the host, and
for a podmand in a cgroup namespace its own root's, a subset of the host root's (a
child has no controller its parent lacks). On v1 it is ``/proc/cgroups``, which no
namespace changes: an enabled controller with a hierarchy is mounted. Rootless Podman
reads its own cgroup, which podmand cannot see (another service, another unit, a
container), so podmand's own ``cgroup.controllers`` would prove nothing about it: only
``/info`` answers there. ``/info`` has the last word either way.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from ..libpod import Info, versions

CGROUP2_MARKER = "/sys/fs/cgroup/cgroup.controllers"  # only the unified hierarchy has it at the root
PROC_CGROUPS = "/proc/cgroups"
FULL_MAP = ("0", "0", "4294967295")  # the initial user namespace's uid_map


@dataclass(frozen=True)
class Limits:
    """Which limits Podman applies: the two ``limit_supported`` bits."""

    cpu: bool
    memory: bool

    def describe(self) -> str:
        if self.cpu == self.memory:
            return f"CPU and memory limits are {'' if self.cpu else 'not '}enforced"
        on, off = ("CPU", "memory") if self.cpu else ("memory", "CPU")
        return f"{on} limits are enforced, {off} limits are not"


NONE = Limits(cpu=False, memory=False)
BOTH = Limits(cpu=True, memory=True)


def from_info(info: Info) -> Limits:
    available = versions.applied_controllers(info)
    return Limits(cpu="cpu" in available, memory="memory" in available)


def v1_controllers(proc_cgroups: str) -> set[str]:
    """The controllers ``/proc/cgroups`` shows enabled and mounted on a v1 hierarchy."""
    found = set()
    for line in proc_cgroups.splitlines():
        fields = line.split()
        if line.startswith("#") or len(fields) < 4:
            continue
        name, hierarchy, _count, enabled = fields[:4]
        if hierarchy != "0" and enabled == "1":
            found.add(name)
    return found


def predict(*, controllers: set[str], podman_uid: int | None, host_namespace: bool) -> Limits | None:
    """The answer when the facts prove it; None when only ``/info`` can tell.
    ``controllers``: what podmand reads of the controllers (never more than rootful Podman lists)."""
    if podman_uid == 0 and host_namespace and {"cpu", "memory"} <= controllers:
        return BOTH
    return None


def socket_listener(path: str) -> tuple[int, int] | None:
    """(pid, uid) of the process listening on ``path``, as this namespace sees them
    (the pid is 0 from another PID namespace); None when nothing answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect(path)
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def socket_owner(path: str) -> int | None:
    """The uid of the process listening on ``path`` (as this user namespace sees it)."""
    found = socket_listener(path)
    return found[1] if found else None


def in_host_namespace(uid_map: str) -> bool:
    """``/proc/self/uid_map`` maps every uid to itself: podmand is not in a container's user namespace."""
    return [line.split() for line in uid_map.splitlines()] == [list(FULL_MAP)]


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def local_controllers() -> set[str]:
    """The controllers podmand sees: its cgroup v2 root's, else v1's from ``/proc/cgroups``."""
    if Path(CGROUP2_MARKER).exists():
        return set(_read(CGROUP2_MARKER).split())
    return v1_controllers(_read(PROC_CGROUPS))


def predicted(podman_socket: str) -> Limits | None:
    """``predict`` from this host's facts about the Podman behind ``podman_socket``."""
    return predict(
        controllers=local_controllers(),
        podman_uid=socket_owner(podman_socket),
        host_namespace=in_host_namespace(_read("/proc/self/uid_map")),
    )
