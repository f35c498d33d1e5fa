"""Unit tests for podmand.host.capacity: the arithmetic of how many sandboxes a host holds."""

from __future__ import annotations

import ipaddress
import resource

import pytest

from podmand.host import capacity
from podmand.host.capacity import KeyQuota

POOL = ipaddress.IPv4Network("10.128.0.0/9")


@pytest.mark.parametrize(("prefix", "hosts"), [(24, 253), (23, 509), (16, 65533), (29, 5), (30, 1)])
def test_network_hosts_leave_out_network_broadcast_and_gateway(prefix: int, hosts: int) -> None:
    assert capacity.network_hosts(prefix) == hosts


@pytest.mark.parametrize(
    ("sandboxes", "prefix"),
    [
        (0, 24),
        (64, 24),  # the usual 65536 subordinate ids: Podman's own /24 is enough
        (253, 24),
        (254, 23),  # the 254th sandbox no longer fits a /24
        (256, 23),  # tests/setup-podman.sh's 262144 ids
        (2097152, 19),  # rootful 'containers' range: the default /9 pool keeps room for 1024 workspaces
        (None, 19),  # no bound known: as wide as that room allows
    ],
)
def test_network_prefix_is_the_narrowest_that_holds_the_sandboxes(sandboxes: int | None, prefix: int) -> None:
    assert capacity.network_prefix(sandboxes, POOL) == prefix


def test_network_prefix_keeps_room_in_its_pool_and_never_goes_wider_than_it() -> None:
    assert capacity.network_prefix(None, ipaddress.IPv4Network("10.0.0.0/8")) == 18  # 1024 workspaces
    assert capacity.network_prefix(None, ipaddress.IPv4Network("10.128.0.0/20")) == 24  # /24 at the narrowest
    assert capacity.network_prefix(None, ipaddress.IPv4Network("10.128.0.0/24")) == 24  # the whole pool


def test_workspace_prefix_setting_wins_else_sized_from_ids() -> None:
    assert capacity.workspace_prefix(20, POOL, 262144, "auto") == 20
    assert capacity.workspace_prefix(0, POOL, 262144, "auto") == 23
    assert capacity.workspace_prefix(0, POOL, 262144, "auto:size=65536") == 24  # 4 sandboxes
    assert capacity.workspace_prefix(0, POOL, 0, "auto") == 19  # ids unknown (a sidecar's files)
    assert capacity.workspace_prefix(0, POOL, 262144, "keep-id") == 19  # ids do not bound keep-id


def test_parse_subids_by_name_or_uid_sums_ranges() -> None:
    text = "podmand:100000:65536\n1001:165536:196608\nother:1:5\nbroken line\npodmand:x:y\n"
    assert capacity.parse_subids(text, "podmand", 1001) == 262144
    assert capacity.parse_subids(text, "podmand", None) == 65536
    assert capacity.parse_subids(text, "nobody", 4242) == 0


def test_subid_sandboxes_use_the_size_podmand_asks_for() -> None:
    assert capacity.subid_sandboxes(262144, "auto") == 256
    assert capacity.subid_sandboxes(262144, "auto:size=2048") == 128
    assert capacity.subid_sandboxes(262144, "host") is None


def test_key_quota_bounds_only_sandboxes_that_share_a_uid() -> None:
    quota = KeyQuota(maxkeys=200, maxbytes=20000)
    assert capacity.key_sandboxes(quota, "auto") is None  # each sandbox's root is its own host uid
    assert capacity.key_sandboxes(quota, "keep-id") == 200
    assert capacity.key_sandboxes(KeyQuota(maxkeys=1000, maxbytes=20000), "host") == 20000 // 70  # bytes bind


def test_descriptors_bound_only_a_wait_per_sandbox() -> None:
    assert capacity.descriptor_sandboxes(1024, "events") is None
    assert capacity.descriptor_sandboxes(1024, "wait") == 1024 - capacity.DESCRIPTOR_RESERVE
    assert capacity.descriptor_sandboxes(100, "wait") == 0
    assert capacity.descriptor_sandboxes(resource.RLIM_INFINITY, "wait") is None


def test_overall_is_the_smallest_bound() -> None:
    assert capacity.overall([256, None, 509, None]) == 256
    assert capacity.overall([None, None]) is None
