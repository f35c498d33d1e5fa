"""Unit tests for podmand.security.fence: canonical fence facts, the generation-bound digest and claims."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from podmand.security import fence

GEN = "g00000000000000a1"


def facts() -> dict[str, Any]:
    return {
        "container_id": "c0ffee" * 10 + "abcd",
        "image_id": "sha256:" + "ab" * 32,
        "effective_caps": ["CAP_CHOWN", "CAP_SETUID", "CAP_KILL"],
        "cap_add": [],
        "cap_drop": ["CAP_NET_RAW", "CAP_MKNOD"],
        "uid_map": ["0:1025:1024", "1024:1:1"],
        "gid_map": ["0:1025:1024", "1024:1:1"],
        "userns_mode": "private",
        "network_mode": "bridge",
        "networks": ["openshell-ws", "alpha"],
        "mounts": [
            {"destination": "/sandbox", "type": "volume", "rw": True},
            {"destination": "/.openshell", "type": "volume", "rw": False},
        ],
        "seccomp": "default",
        "no_new_privileges": True,
        "privileged": False,
        "memory_limit": 536870912,
        "cpu_quota": 100000,
        "cpu_period": 100000,
        "pids_limit": 512,
    }


def test_canonical_is_compact_sorted_json() -> None:
    text = fence.canonical(facts())
    doc = json.loads(text)
    assert list(doc) == sorted(doc)
    assert " " not in text.replace("private", "")
    assert doc["effective_caps"] == ["CAP_CHOWN", "CAP_KILL", "CAP_SETUID"]
    assert doc["cap_drop"] == ["CAP_MKNOD", "CAP_NET_RAW"]
    assert doc["networks"] == ["alpha", "openshell-ws"]
    assert [m["destination"] for m in doc["mounts"]] == ["/.openshell", "/sandbox"]
    assert doc["uid_map"] == ["0:1025:1024", "1024:1:1"]


def test_canonical_does_not_mutate_input() -> None:
    original = facts()
    kept = copy.deepcopy(original)
    fence.canonical(original)
    assert original == kept


def test_digest_stable_under_reordering() -> None:
    shuffled = facts()
    shuffled["effective_caps"].reverse()
    shuffled["cap_drop"].reverse()
    shuffled["networks"].reverse()
    shuffled["mounts"].reverse()
    shuffled = dict(reversed(list(shuffled.items())))
    assert fence.canonical(shuffled) == fence.canonical(facts())
    assert fence.evidence(shuffled, GEN).evidence_digest == fence.evidence(facts(), GEN).evidence_digest


def test_id_map_order_matters() -> None:
    """uid/gid maps are ordered, not sets."""
    changed = facts()
    changed["uid_map"].reverse()
    assert fence.digest(changed, GEN) != fence.digest(facts(), GEN)


@pytest.mark.parametrize(("key", "value"), [
    ("container_id", "deadbeef"),
    ("effective_caps", ["CAP_CHOWN", "CAP_SETUID", "CAP_KILL", "CAP_SYS_ADMIN"]),
    ("networks", ["openshell-ws"]),
    ("mounts", [{"destination": "/sandbox", "type": "volume", "rw": False}]),
    ("no_new_privileges", False),
    ("privileged", True),
    ("memory_limit", 0),
    ("seccomp", "unconfined"),
    ("userns_mode", "host"),
])
def test_digest_changes_with_any_fact(key: str, value: Any) -> None:
    changed = facts()
    changed[key] = value
    assert fence.digest(changed, GEN) != fence.digest(facts(), GEN)


def test_digest_changes_with_generation() -> None:
    assert fence.digest(facts(), GEN) != fence.digest(facts(), "g00000000000000a2")


def test_digest_formula() -> None:
    """sha256 over the 8-byte big-endian generation length, the generation, then the canonical JSON."""
    expected = hashlib.sha256(len(GEN).to_bytes(8, "big") + GEN.encode() + fence.canonical(facts()).encode())
    assert fence.digest(facts(), GEN) == "sha256:" + expected.hexdigest()


def test_length_prefix_separates_generation_from_facts() -> None:
    """Moving bytes between the generation and the JSON cannot produce the same digest."""
    assert fence.digest({}, "ab") != fence.digest({}, "a")
    assert fence.digest({}, "") == "sha256:" + hashlib.sha256(b"\x00" * 8 + b"{}").hexdigest()


def test_evidence_proto() -> None:
    ev = fence.evidence(facts(), GEN)
    assert ev.generation == GEN
    assert ev.evidence_digest == fence.digest(facts(), GEN)
    assert ev.evidence_digest.startswith("sha256:") and len(ev.evidence_digest) == len("sha256:") + 64
    assert dict(ev.resource_claims) == {
        "podman.container_id": facts()["container_id"],
        "podman.image_id": facts()["image_id"],
        "podman.userns": "private 0:1025:1024,1024:1:1",
        "podman.network_mode": "bridge",
        "podman.no_new_privileges": "true",
        "podman.privileged": "false",
    }


def test_userns_claim_variants() -> None:
    f = facts()
    f.update(uid_map=["0:1025:1024"], gid_map=["0:2000:1024"], userns_mode="private", privileged=True,
             no_new_privileges=False)
    claims = fence.evidence(f, GEN).resource_claims
    assert claims["podman.userns"] == "private 0:1025:1024 gid=0:2000:1024"
    assert claims["podman.privileged"] == "true"
    assert claims["podman.no_new_privileges"] == "false"
    f.update(uid_map=[], gid_map=[], userns_mode="host")
    assert fence.evidence(f, GEN).resource_claims["podman.userns"] == "host"
