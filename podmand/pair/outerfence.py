"""The outer fence: what Podman's inspect of the workload says confines its network,
and the backend-neutral guarantees both runtimes are told (contract §6).

The workload has no network of its own: netns ``none``, not privileged, no network
attached. podmand checks exactly that in the workload's inspect before every start and
refuses to go on (FailedPrecondition naming the container) when it does not hold.
When it holds, the facts become the native evidence
``{"container_id":…,"network_mode":"none","unexpected_networks":[]}`` and their
projection: all four guarantees (netns none: egress denied by default, revocation
and the controller's loss cannot open it; no network attached: no unmanaged path),
bound to the runtime generation by ``evidence_digest`` = SHA-256 of
u64_be(len(generation)) ‖ generation ‖ native evidence, as 64 lowercase hex digits.
The same :class:`OuterFence` goes into ``bootstrap.json`` and the runtime descriptor:
the runtime and the supervisor each require all four, for this generation, and the
supervisor requires the runtime's confirmation to repeat it. Upstream's Podman
driver projects the evidence from constants and checks the inspect apart; here the
projection is made from the inspect itself, so it cannot say more than Podman did.
"""

from __future__ import annotations

import hashlib

import msgspec

from ..errors import FailedPrecondition
from ..libpod import ContainerInspect

__all__ = [
    "GUARANTEES",
    "OuterFence",
    "PodmanEvidence",
    "binding_digest",
    "evidence",
    "outer_fence",
]

GUARANTEES = (
    "default_deny_egress",
    "no_unmanaged_egress_path",
    "revocation_verified",
    "controller_loss_fails_closed",
)
"""Upstream's ``OuterFenceGuarantee`` names, in its declaration order (a set serialised in order)."""


class OuterFence(msgspec.Struct, forbid_unknown_fields=True):
    """``OuterFenceGuarantees``, as the runtime and the supervisor decode it."""

    generation: str
    established: list[str]
    evidence_digest: str


class PodmanEvidence(msgspec.Struct, forbid_unknown_fields=True):
    """The native evidence of Podman's fence: what the digest commits to."""

    container_id: str
    network_mode: str
    unexpected_networks: list[str]


def evidence(inspect: ContainerInspect) -> PodmanEvidence:
    """What the workload's inspect says of its network (``none`` is not a network)."""
    networks = inspect.network_settings.networks or {}
    return PodmanEvidence(inspect.id, inspect.host_config.network_mode, sorted(n for n in networks if n != "none"))


def binding_digest(generation: str, native: bytes) -> str:
    """SHA-256 of u64_be(len(generation)) ‖ generation ‖ native, as 64 hex digits."""
    gen = generation.encode("utf-8")
    return hashlib.sha256(len(gen).to_bytes(8, "big") + gen + native).hexdigest()


def outer_fence(generation: str, inspect: ContainerInspect) -> OuterFence:
    """The fence of the workload ``inspect`` describes, for runtime ``generation``, or
    FailedPrecondition naming the container and what does not hold."""
    who = f"workload container {inspect.name.removeprefix('/') or inspect.id[:12] or '(unnamed)'}"
    if not generation:
        raise FailedPrecondition(f"{who}: the outer fence needs a runtime generation")
    facts = evidence(inspect)
    wrong = []
    if not facts.container_id:
        wrong.append("its inspect has no container id")
    if facts.network_mode != "none":
        wrong.append(f"network mode is {facts.network_mode or '(unset)'!r}, not 'none'")
    if inspect.host_config.privileged:
        wrong.append("it is privileged")
    if facts.unexpected_networks:
        wrong.append(f"networks are attached ({', '.join(facts.unexpected_networks)})")
    if wrong:
        raise FailedPrecondition(f"{who}: the outer fence does not hold: {'; '.join(wrong)}")
    return OuterFence(generation, list(GUARANTEES), binding_digest(generation, msgspec.json.encode(facts)))
