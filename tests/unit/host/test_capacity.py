"""Unit tests for podmand.host.capacity: the arithmetic of how many sandboxes a host holds."""

from __future__ import annotations

import resource

from podmand.host import capacity
from podmand.host.capacity import KeyQuota


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
