"""Podman ``/info`` answers as real hosts gave them, for tests of what podmand reads
from them (only those fields are kept; their values are as recorded).

Each says where it is from: Podman's own source, an issue's ``podman info`` output
(Podman's version as the issue states it, or as its buildah version ties it to), or
this test host's Podman.
"""

from __future__ import annotations

from typing import Any


def info(version: str, *, rootless: bool = True, **host: Any) -> dict[str, Any]:
    return {
        "host": {"security": {"rootless": rootless}, **host},
        "store": {"graphDriverName": "overlay"},
        "version": {"Version": version, "APIVersion": version},
    }


# This host (Debian 12): GET /v4.0.0/libpod/info of the rootless user podmand's Podman.
DEBIAN12_ROOTLESS_V1 = info(
    "4.3.1", cgroupManager="cgroupfs", cgroupVersion="v1", cgroupControllers=[], eventLogger="file",
    ociRuntime={"name": "runc"},
)

# containers/podman#22502 (Podman 5.0.1, Fedora 40, rootless uid 1000): cpu, io, memory and
# pids delegated.
FEDORA40_ROOTLESS_DELEGATED = info(
    "5.0.1", cgroupManager="systemd", cgroupVersion="v2", cgroupControllers=["cpu", "io", "memory", "pids"],
    eventLogger="journald",
)

# containers/podman#22881 (buildahVersion 1.36.0: Podman 5.1, Arch, rootless): cpu, memory and
# pids delegated; the host whose container failed with "unable to replace host-gateway".
# rootlessNetworkCmd is not in the excerpt: pasta, Podman 5's default, is added.
ARCH_ROOTLESS_5_1 = info(
    "5.1.0", cgroupManager="systemd", cgroupVersion="v2", cgroupControllers=["cpu", "memory", "pids"],
    eventLogger="journald", rootlessNetworkCmd="pasta",
)

# containers/podman#14856 (Podman 4.1.1, rootless, systemd, v2): memory and pids only, the
# default when user@.service delegates no cpu.
ROOTLESS_NO_CPU = info(
    "4.1.1", cgroupManager="systemd", cgroupVersion="v2", cgroupControllers=["memory", "pids"],
)

# Podman's own docs/source/markdown/podman-info.1.md at v5.4.2 (line 41): rootless, systemd,
# v2, and no controller at all (containers/podman#11931 shows the same).
ROOTLESS_NONE_DELEGATED = info(
    "3.4.0", cgroupManager="systemd", cgroupVersion="v2", cgroupControllers=[], eventLogger="journald",
    ociRuntime={"name": "crun"},
)

# containers/podman#21575 (buildahVersion 1.33.5: Podman 4.9, Gentoo, rootless without
# systemd): every controller listed, and the limits "visible in podman inspect but have no
# effect": with cgroupfs, rootless containers get no cgroup.
ROOTLESS_CGROUPFS = info(
    "4.9.3", cgroupManager="cgroupfs", cgroupVersion="v2",
    cgroupControllers=["cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"],
)

# Rootful Podman on cgroup v1, made by Podman's rule rather than recorded (it lists the
# enabled /proc/cgroups subsystems mounted under /sys/fs/cgroup:
# vendor/github.com/containers/common/pkg/cgroups/cgroups_linux.go:123-145 at v5.4.2), as on
# this host; and the same host booted with cgroup_disable=memory, where Podman discards
# memory limits (pkg/specgen/generate/validate_linux.go:46-50).
ROOTFUL_V1 = info(
    "4.3.1", rootless=False, cgroupManager="systemd", cgroupVersion="v1",
    cgroupControllers=["cpuset", "cpu", "cpuacct", "blkio", "memory", "devices", "freezer", "pids"],
)
ROOTFUL_V1_NO_MEMORY = info(
    "4.3.1", rootless=False, cgroupManager="systemd", cgroupVersion="v1",
    cgroupControllers=["cpuset", "cpu", "cpuacct", "blkio", "devices", "freezer", "pids"],
)
