"""What the connected Podman can do, and what it gets wrong, by the version its ``/info``
reports.

Each behaviour that came, broke or was fixed with a Podman release is declared here
once, beside the source that shows it (Podman's tree at the tag named), and read where
it matters: the request checks (sandbox/driverconfig.py's ``SUBPATH_SINCE``), and
``podmand doctor`` (cli/doctor/versionchecks.py), which names the bad ones with their fix. The driver asks
Podman once (:class:`Probe`), as it does for Podman's storage paths: a Podman's
version does not change while it serves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import Info, PodmanClient

Version = tuple[int, int, int]

# A named volume's SubPath reaches libpod since 4.4.0 (pkg/specgen/generate/container_create.go:407
# at v4.4.0), but 4.4 joins it to the volume's path and follows a symlink a tenant left there
# out of the volume; 4.5.0 opens it beneath the volume and refuses an escape ("libpod: mount
# safely subpaths", 4d56292e7a; libpod/container_internal_common.go:255 at v4.5.0). Podman 5.4
# only added --mount type=volume,subpath= to the CLI (RELEASE_NOTES.md:38 at v5.4.2).
VOLUME_SUBPATH: Version = (4, 5, 0)
# An image volume's SubPath (JSON "subPath") since 5.1.0: pkg/specgen/volumes.go:56-58 and
# pkg/specgen/generate/container_create.go:504 at v5.1.0, mounted the same safe way.
IMAGE_SUBPATH: Version = (5, 1, 0)
# 5.1.0-5.2.x write a live event stream's response head only with its first event
# (pkg/api/handlers/compat/events.go:71-76 at v5.1.0; at once again at v5.3.0, line 73).
EVENTS_HEAD_WITHHELD: tuple[Version, Version] = ((5, 1, 0), (5, 3, 0))
# 5.3.0-5.4.1: a libpod create that does not set healthMaxLogCount/healthMaxLogSize gets 0,
# no bound, so a health log grows without end (containers/podman#25473; fixed in 5.4.2 by
# defaulting them before decoding, pkg/api/handlers/libpod/containers_create.go:47-49).
HEALTH_LOG_UNBOUNDED: tuple[Version, Version] = ((5, 3, 0), (5, 4, 2))


def parse_version(text: str) -> Version | None:
    """``4.3.1``, ``v5.4.2``, ``5.0.0-dev`` -> (major, minor, patch); None when it is no version."""
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not match:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def shown(version: Version) -> str:
    return ".".join(map(str, version))


def within(version: Version | None, span: tuple[Version, Version]) -> bool:
    """``version`` is at least the span's first and below its second."""
    return version is not None and span[0] <= version < span[1]


@dataclass(frozen=True)
class Features:
    """A Podman's version and what podmand may ask of it by that version."""

    version: str  # as /info says it; "" when unknown
    rootless: bool | None = None  # None: unknown
    # The rootless user's subordinate ids (its namespace less its own id, the fewer of
    # uids and gids): what keep-id and nomap map (usernamespace.py). None: unknown or rootful.
    subordinate_ids: int | None = None
    # The cgroup controllers whose limits Podman applies to a container (cpu, memory, pids...),
    # from /info (host/enforcement.py says why): None when unknown, and then every limit is sent.
    limited: frozenset[str] | None = None

    @property
    def parsed(self) -> Version | None:
        return parse_version(self.version)

    def has(self, since: Version) -> bool:
        parsed = self.parsed
        return parsed is not None and parsed >= since

    def described(self) -> str:
        return f"Podman {self.version}" if self.version else "this Podman (its version is unknown)"


UNKNOWN = Features("")  # nothing beyond what every Podman podmand runs on (4.3) can do


def of(info: Info) -> Features:
    rootless = info.host.security.rootless
    maps = info.host.idMappings
    subids = None
    if rootless and maps and maps.uidmap and maps.gidmap:
        subids = min(sum(m.size for m in ids if m.container_id != 0) for ids in (maps.uidmap, maps.gidmap))
    return Features(info.version.version, rootless=rootless, subordinate_ids=subids, limited=applied_controllers(info))


def applied_controllers(info: Info) -> frozenset[str]:
    """The controllers whose limits Podman applies: none rootless on cgroup v1 or with the
    cgroupfs manager (the runtime gets no cgroup of its own there; on v1 Podman drops the
    limits with a warning, on v2 the runtime fails the start: Podman 6.1.1 here, "openat2
    .../pids.max: no such file or directory"), else those its ``cgroupControllers`` lists."""
    host = info.host
    if host.security.rootless and (host.cgroupVersion != "v2" or host.cgroupManager != "systemd"):
        return frozenset()
    return frozenset(host.cgroupControllers or ())


class Probe:
    """The connected Podman's :class:`Features`, asked of it once."""

    def __init__(self, podman: PodmanClient) -> None:
        self.podman = podman
        self._known: Features | None = None

    @property
    def known(self) -> Features:
        """What an earlier call learnt (UNKNOWN before the first)."""
        return self._known or UNKNOWN

    async def __call__(self) -> Features:
        if self._known is None:
            self._known = of(await self.podman.served_info())
        return self._known
