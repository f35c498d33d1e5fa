"""Unit tests for whether Podman applies CPU and memory limits: from its /info, and predicted before it."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import msgspec
import pytest

from podmand.host import enforcement
from podmand.libpod import Info, versions
from tests.fakes import infos


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        (infos.FEDORA40_ROOTLESS_DELEGATED, enforcement.BOTH),
        (infos.ARCH_ROOTLESS_5_1, enforcement.BOTH),
        (infos.ROOTLESS_NO_CPU, enforcement.Limits(cpu=False, memory=True)),  # v2 without Delegate=cpu
        (infos.ROOTLESS_NONE_DELEGATED, enforcement.NONE),
        (infos.ROOTLESS_CGROUPFS, enforcement.NONE),  # every controller listed, yet no cgroup for the container
        (infos.DEBIAN12_ROOTLESS_V1, enforcement.NONE),
        (infos.ROOTFUL_V1, enforcement.BOTH),
        (infos.ROOTFUL_V1_NO_MEMORY, enforcement.Limits(cpu=True, memory=False)),
    ],
    ids=["fedora40-delegated", "arch-5.1", "no-cpu", "none-delegated", "cgroupfs", "debian12-v1", "rootful-v1",
         "rootful-no-memory"],
)
def test_from_info_claims_a_limit_only_for_a_controller_podman_has(recorded: dict[str, Any],
                                                                   expected: enforcement.Limits) -> None:
    """cgroup v2 is not enough: each bit needs its controller in Podman's own list, and
    rootless Podman with cgroupfs or on v1 gives the container no cgroup at all."""
    assert enforcement.from_info(msgspec.convert(recorded, Info)) == expected


def test_a_rootful_v2_info_lists_the_root_cgroups_controllers() -> None:
    info = msgspec.convert(infos.info("5.4.2", rootless=False, cgroupVersion="v2", cgroupManager="systemd",
                                      cgroupControllers=["cpuset", "cpu", "io", "memory", "pids"]), Info)
    assert enforcement.from_info(info) == enforcement.BOTH


def test_limits_describe_both_and_either() -> None:
    assert enforcement.BOTH.describe() == "CPU and memory limits are enforced"
    assert enforcement.NONE.describe() == "CPU and memory limits are not enforced"
    assert enforcement.Limits(cpu=False, memory=True).describe() == "memory limits are enforced, CPU limits are not"


ALL = {"cpuset", "cpu", "io", "memory", "pids"}


@pytest.mark.parametrize(
    ("controllers", "uid", "host", "expected"),
    [
        (ALL, 0, True, enforcement.BOTH),  # root Podman, as the host sees it, with both controllers
        ({"memory", "pids"}, 0, True, None),  # cpu not seen here: Podman may still list it (a subset is read)
        (ALL, 0, False, None),  # "root" in a container's namespace may be a rootless Podman
        (ALL, 1000, True, None),  # rootless: Podman reads its own cgroup, not podmand's
        (ALL, None, True, None),  # owner unknown
    ],
)
def test_predict_answers_only_what_the_facts_prove(controllers: set[str], uid: int | None, host: bool,
                                                   expected: enforcement.Limits | None) -> None:
    """cgroup v2 alone predicts nothing any more: a rootless Podman's controllers are its own."""
    assert enforcement.predict(controllers=controllers, podman_uid=uid, host_namespace=host) == expected


PROC_CGROUPS = """#subsys_name\thierarchy\tnum_cgroups\tenabled
cpuset\t3\t3\t1
cpu\t1\t3\t1
cpuacct\t2\t3\t1
memory\t4\t46\t0
net_cls\t0\t2\t1
pids\t8\t3\t1
"""


def test_v1_controllers_are_the_enabled_mounted_ones() -> None:
    """/proc/cgroups as this (v1) host has it, memory disabled (cgroup_disable=memory) and
    net_cls unmounted: what rootful Podman would list."""
    assert enforcement.v1_controllers(PROC_CGROUPS) == {"cpuset", "cpu", "cpuacct", "pids"}
    assert enforcement.v1_controllers("") == set()


def test_host_namespace_is_the_full_identity_map() -> None:
    assert enforcement.in_host_namespace("         0          0 4294967295\n")
    assert not enforcement.in_host_namespace("         0       1000          1\n         1     100000      65536\n")
    assert not enforcement.in_host_namespace("")


def test_socket_owner_is_the_listeners_uid(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        assert enforcement.socket_owner(path) == os.geteuid()
    assert enforcement.socket_owner(str(tmp_path / "none.sock")) is None


def test_the_controllers_podman_applies_decide_what_a_sandbox_asks_for() -> None:
    """Podman 6.1.1 in a tree whose cgroup v2 delegates only hugetlb (issue 32): no bit, and no
    controller whose limit a spec may carry (libpod.versions.applied_controllers, what
    sandbox.resources.applicable keeps); rootless cgroupfs: none, though every one is listed."""
    bare = msgspec.convert(infos.info("6.1.1", rootless=False, cgroupVersion="v2", cgroupManager="systemd",
                                      cgroupControllers=["hugetlb"]), Info)
    assert enforcement.from_info(bare) == enforcement.NONE
    assert versions.applied_controllers(bare) == frozenset({"hugetlb"})
    assert versions.of(bare).limited == frozenset({"hugetlb"})
    assert versions.applied_controllers(msgspec.convert(infos.ROOTLESS_CGROUPFS, Info)) == frozenset()
    assert "pids" in versions.applied_controllers(msgspec.convert(infos.FEDORA40_ROOTLESS_DELEGATED, Info))
