"""Unit tests for predicting, before /info, whether Podman applies CPU and memory limits."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import msgspec
import pytest

from podmand import enforcement
from podmand.libpod import Info


@pytest.mark.parametrize(
    ("rootless", "version", "enforced"),
    [(True, "v1", False), (True, "v2", True), (False, "v1", True), (False, "v2", True)],
)
def test_from_info_drops_limits_only_rootless_on_v1(rootless: bool, version: str, enforced: bool) -> None:
    info = msgspec.convert({"host": {"cgroupVersion": version, "security": {"rootless": rootless}}}, Info)
    assert enforcement.from_info(info) is enforced


@pytest.mark.parametrize(
    ("cgroup2", "uid", "host", "expected"),
    [
        (True, 1000, False, True),  # unified hierarchy: Podman is not on v1
        (False, 0, True, True),  # root Podman, as the host sees it: rootful
        (False, 0, False, None),  # "root" in a container's namespace may be a rootless Podman
        (False, 1000, True, None),  # rootless on v1 or hybrid: only /info can tell
        (False, None, True, None),  # owner unknown
    ],
)
def test_predict_answers_only_what_the_facts_prove(cgroup2: bool, uid: int | None, host: bool,
                                                   expected: bool | None) -> None:
    assert enforcement.predict(cgroup2=cgroup2, podman_uid=uid, host_namespace=host) is expected


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
