"""The outer fence from the workload's inspect (podmand/pair/outerfence.py, contract §6)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec
import pytest

from podmand.errors import FailedPrecondition
from podmand.libpod import ContainerInspect
from podmand.pair import outerfence

CID = "4f" * 32
GEN = "3c1e5b2a-8d7f-4e29-9a61-0b2c4d6e8f10"


def inspect(**over: Any) -> ContainerInspect:
    """The workload as Podman 4.3.1 inspects a netns=none container (``Networks`` absent)."""
    doc: dict[str, Any] = {"Id": CID, "Name": "openshell--box-abc", "HostConfig": {"NetworkMode": "none",
                           "Privileged": False}, "NetworkSettings": {}}
    for key, value in over.items():
        section, _, field = key.partition("__")
        if field:
            doc[section][field] = value
        else:
            doc[section] = value
    return msgspec.json.decode(json.dumps(doc), type=ContainerInspect)


def test_a_fenced_workload_gets_all_four_guarantees_bound_to_the_generation() -> None:
    fence = outerfence.outer_fence(GEN, inspect())
    assert fence.generation == GEN
    assert fence.established == ["default_deny_egress", "no_unmanaged_egress_path", "revocation_verified",
                                 "controller_loss_fails_closed"]
    native = b'{"container_id":"' + CID.encode() + b'","network_mode":"none","unexpected_networks":[]}'
    expected = hashlib.sha256(len(GEN).to_bytes(8, "big") + GEN.encode() + native).hexdigest()
    assert fence.evidence_digest == expected
    assert len(fence.evidence_digest) == 64 and fence.evidence_digest == fence.evidence_digest.lower()


def test_the_digest_binds_generation_and_container() -> None:
    one = outerfence.outer_fence(GEN, inspect()).evidence_digest
    assert outerfence.outer_fence(GEN + "x", inspect()).evidence_digest != one
    assert outerfence.outer_fence(GEN, inspect(Id="5e" * 32)).evidence_digest != one
    # the length prefix keeps (generation, evidence) pairs apart that concatenate alike
    assert outerfence.binding_digest("ab", b"c") != outerfence.binding_digest("a", b"bc")


@pytest.mark.parametrize("networks", [{}, {"none": {}}])
def test_none_is_not_a_network(networks: dict[str, Any]) -> None:
    """Podman 4.3.1 leaves ``Networks`` out for netns none; a ``none`` key is no network either."""
    fence = outerfence.outer_fence(GEN, inspect(NetworkSettings={"Networks": networks}))
    assert fence.evidence_digest == outerfence.outer_fence(GEN, inspect()).evidence_digest


@pytest.mark.parametrize(("over", "said"), [
    ({"HostConfig__NetworkMode": "bridge"}, "network mode is 'bridge', not 'none'"),
    ({"HostConfig__NetworkMode": "host"}, "network mode is 'host', not 'none'"),
    ({"HostConfig__NetworkMode": ""}, r"network mode is '\(unset\)', not 'none'"),
    ({"HostConfig__Privileged": True}, "it is privileged"),
    ({"NetworkSettings": {"Networks": {"podman": {}, "none": {}}}}, r"networks are attached \(podman\)"),
    ({"Id": ""}, "its inspect has no container id"),
])
def test_a_fence_that_does_not_hold_is_refused_naming_the_container(over: dict[str, Any], said: str) -> None:
    with pytest.raises(FailedPrecondition, match=f"^workload container openshell--box-abc: the outer fence does "
                                                 f"not hold: .*{said}"):
        outerfence.outer_fence(GEN, inspect(**over))


def test_every_failure_is_said_at_once() -> None:
    bad = inspect(HostConfig={"NetworkMode": "slirp4netns", "Privileged": True},
                  NetworkSettings={"Networks": {"b": {}, "a": {}}})
    with pytest.raises(FailedPrecondition) as info:
        outerfence.outer_fence(GEN, bad)
    assert info.value.message.endswith(
        "network mode is 'slirp4netns', not 'none'; it is privileged; networks are attached (a, b)")


def test_no_generation_no_fence() -> None:
    with pytest.raises(FailedPrecondition, match="needs a runtime generation"):
        outerfence.outer_fence("", inspect())
