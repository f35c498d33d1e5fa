"""The pair's JSON documents, in the shapes the two runtimes decode (contract §2.3, §2.4).

- ``bootstrap.json`` (:class:`BoundaryConfig`), for the workload runtime: the session,
  the gateway's public keys, where to listen and with which certificate, the resource
  claims, the workload identity, the outer fence and the child environment.
- ``runtime-descriptor.json`` (:class:`RuntimeDescriptor`), for the supervisor: the
  same session, where to dial, the name and the one trust anchor to verify there, the
  host-gateway address, the claims, the identity and the fence.
- ``auth.json``: the bundle's ``supervisor`` object as the gateway sent it, unchanged
  (``LaunchAuthentication.supervisor_json``): the only document with a bearer token.
- ``restart-metadata.json`` (:class:`RestartMetadata`), which podmand reads back on a
  start: the generation it last launched, the identity and the child environment.

The runtimes decode these strictly (unknown fields fail), so each struct has exactly
upstream's fields, encoded in their order with map keys sorted; restart metadata alone
is read leniently, as upstream reads it. The gateway's tokens reach ``auth.json`` and
nothing else; a test holds every other document (and the channel archive) to that.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import msgspec

from .. import names
from ..errors import FailedPrecondition
from ..sandbox.identity import MAX_ID, Resolved
from ..security.tokens import LaunchAuthentication
from .outerfence import OuterFence
from .tls import TlsMaterial, server_name

__all__ = [
    "CLAIM_CONTAINER",
    "CLAIM_EXTRA_GROUPS",
    "CLAIM_IMAGE",
    "BoundaryConfig",
    "Documents",
    "Launch",
    "RestartMetadata",
    "RuntimeDescriptor",
    "WorkloadIdentity",
    "child_env",
    "documents",
    "encode",
    "host_gateway_ip",
    "identity_of",
    "read_restart_metadata",
    "resource_claims",
    "workload_identity",
]

CLAIM_CONTAINER = "podman.container_id"
CLAIM_IMAGE = "podman.image_identity"
CLAIM_EXTRA_GROUPS = "openshell.identity.allow_extra_supplementary_groups"
_RESERVED_ENV_PREFIX = "OPENSHELL_"


class WorkloadIdentity(msgspec.Struct, forbid_unknown_fields=True):
    """``ResolvedWorkloadIdentity``: non-root, supplementary groups sorted, unique and
    without the primary gid (:func:`workload_identity` makes one)."""

    uid: int
    gid: int
    supplementary_gids: list[int]
    source: str
    resource_digest: str


class GatewayKey(msgspec.Struct, forbid_unknown_fields=True):
    """A gateway verification key as the runtime reads it: the PEM as a string."""

    key_id: str
    public_key_pem: str


class ServerTls(msgspec.Struct, forbid_unknown_fields=True):
    certificate_chain_path: str
    private_key_path: str


class UnixListener(msgspec.Struct, forbid_unknown_fields=True, tag_field="kind", tag="unix"):
    socket_path: str
    tls: ServerTls


class UnixTransport(msgspec.Struct, forbid_unknown_fields=True, tag_field="kind", tag="unix"):
    socket_path: str


class ClientTls(msgspec.Struct, forbid_unknown_fields=True):
    server_name: str
    trust_anchor_pem: str


class BoundaryConfig(msgspec.Struct, forbid_unknown_fields=True):
    """``bootstrap.json``."""

    boundary_id: str
    generation: str
    session_id: str
    session_rotation: int
    auth_epoch: int
    gateway_id: str
    verification_keys: list[GatewayKey]
    listener: UnixListener
    resource_claims: dict[str, str]
    resource_claim_files: dict[str, str]
    workload_identity: WorkloadIdentity
    outer_fence: OuterFence
    child_env: dict[str, str]


class RuntimeDescriptor(msgspec.Struct, forbid_unknown_fields=True):
    """``runtime-descriptor.json``."""

    boundary_id: str
    generation: str
    session_id: str
    workload_identity: WorkloadIdentity
    transport: UnixTransport
    tls: ClientTls
    host_gateway_ip: str
    resource_claims: dict[str, str]
    outer_fence: OuterFence


class RestartMetadata(msgspec.Struct):
    """``restart-metadata.json`` (unknown fields ignored, as upstream reads it)."""

    generation: str
    workload_identity: WorkloadIdentity
    child_env: dict[str, str]


def _refuse(why: str) -> FailedPrecondition:
    return FailedPrecondition(f"workload identity: {why}")


def workload_identity(
    uid: int, gid: int, supplementary: tuple[int, ...] | list[int], source: str, resource_digest: str
) -> WorkloadIdentity:
    """A checked identity: uid, gid and every supplementary gid in 1..MAX_ID (never root),
    a source and an image digest; the supplementary groups sorted, unique, without the
    primary gid. Otherwise FailedPrecondition naming what is wrong."""
    for what, value in (("uid", uid), ("gid", gid), *(("supplementary gid", g) for g in supplementary)):
        if value == 0:
            raise _refuse(f"{what} 0 (root) is never a workload's")
        if not 0 < value <= MAX_ID:
            raise _refuse(f"{what} {value} is out of range (1-{MAX_ID})")
    if not source.strip():
        raise _refuse("its source is empty")
    if not resource_digest.strip():
        raise _refuse("its image digest is empty")
    return WorkloadIdentity(uid, gid, sorted(set(supplementary) - {gid}), source, resource_digest)


def identity_of(resolved: Resolved) -> WorkloadIdentity:
    """The identity podmand resolved from the image (``sandbox.identity``), checked again."""
    return workload_identity(resolved.uid, resolved.gid, resolved.supplementary, resolved.source, resolved.digest)


def resource_claims(container_id: str, identity: WorkloadIdentity, userns: str) -> dict[str, str]:
    """What binds the documents to this workload: its full container id and its image; with
    a keep-id user namespace (which may keep the user's own supplementary groups in the
    container) the claim that lets the runtime accept more groups than the identity names."""
    if not container_id:
        raise FailedPrecondition("resource claims: the workload's container id is empty")
    claims = {CLAIM_CONTAINER: container_id, CLAIM_IMAGE: identity.resource_digest}
    if userns.partition(":")[0] == "keep-id":
        claims[CLAIM_EXTRA_GROUPS] = "true"
    return dict(sorted(claims.items()))


def host_gateway_ip(value: str, where: str = "host_gateway_ip") -> str:
    """The supervisor's dial target for the host-gateway names, checked as upstream checks
    it: an IP address, not unspecified, multicast, broadcast or the metadata service's."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise FailedPrecondition(f"{where}: {value!r} is not an IP address") from None
    if address.is_unspecified or address.is_multicast or str(address) in ("255.255.255.255", "169.254.169.254"):
        raise FailedPrecondition(f"{where}: {address} cannot be the supervisor's host-gateway address")
    return str(address)


def child_env(image_env: tuple[str, ...] | list[str], user_env: dict[str, str]) -> dict[str, str]:
    """The workload's children's environment: the image's ``ENV``, then the caller's
    (template, then spec), without OpenShell's own ``OPENSHELL_*`` names."""
    env: dict[str, str] = {}
    for entry in image_env:
        key, sep, value = entry.partition("=")
        if sep and key:
            env[key] = value
    env.update(user_env)
    return {k: v for k, v in sorted(env.items()) if not k.startswith(_RESERVED_ENV_PREFIX)}


@dataclass(frozen=True)
class Launch:
    """What one launch's documents are made of. ``generation`` is the one podmand records
    in the restart metadata (a start's ``generation_id``); the bundle's runtime generation
    is the one both runtimes are bound to, and the fence's."""

    sandbox_id: str
    container_id: str
    generation: str
    host_gateway_ip: str
    identity: WorkloadIdentity
    claims: dict[str, str]
    child_env: dict[str, str]
    bundle: LaunchAuthentication
    fence: OuterFence
    tls: TlsMaterial


@dataclass(frozen=True, repr=False)
class Documents:
    """One launch's files, as bytes. ``auth`` holds the gateway's tokens; nothing else does."""

    bootstrap: bytes
    server_certificate: bytes
    server_key: bytes
    runtime_descriptor: bytes
    auth: bytes
    restart_metadata: bytes

    def __repr__(self) -> str:
        return "Documents(<redacted>)"


def encode(document: msgspec.Struct) -> bytes:
    """Fields in their declared order, map keys sorted: the same bytes for the same launch."""
    return msgspec.json.encode(document, order="deterministic")


def documents(launch: Launch) -> Documents:
    """Every file of one launch. The fence must be this runtime generation's."""
    sup = launch.bundle.supervisor
    if launch.fence.generation != sup.runtime_generation:
        raise FailedPrecondition("outer fence: made for another runtime generation than the launch bundle's")
    if launch.claims.get(CLAIM_CONTAINER) != launch.container_id:
        raise FailedPrecondition("resource claims: made for another workload container")
    if launch.tls.server_name != server_name(sup.session_id):
        raise FailedPrecondition("channel TLS: made for another session")
    bootstrap = BoundaryConfig(
        boundary_id=launch.sandbox_id,
        generation=sup.runtime_generation,
        session_id=sup.session_id,
        session_rotation=sup.session_rotation,
        auth_epoch=sup.auth_epoch,
        gateway_id=launch.bundle.gateway_id,
        verification_keys=[GatewayKey(k.key_id, k.pem) for k in launch.bundle.verification_keys],
        listener=UnixListener(names.CONTROL_SOCKET_PATH, ServerTls(names.SERVER_CERT_PATH, names.SERVER_KEY_PATH)),
        resource_claims=launch.claims,
        resource_claim_files={},
        workload_identity=launch.identity,
        outer_fence=launch.fence,
        child_env=launch.child_env,
    )
    descriptor = RuntimeDescriptor(
        boundary_id=launch.sandbox_id,
        generation=sup.runtime_generation,
        session_id=sup.session_id,
        workload_identity=launch.identity,
        transport=UnixTransport(names.CONTROL_SOCKET_PATH),
        tls=ClientTls(launch.tls.server_name, launch.tls.trust_anchor_pem),
        host_gateway_ip=host_gateway_ip(launch.host_gateway_ip),
        resource_claims=launch.claims,
        outer_fence=launch.fence,
    )
    restart = RestartMetadata(launch.generation, launch.identity, launch.child_env)
    return Documents(
        bootstrap=encode(bootstrap),
        server_certificate=launch.tls.certificate_chain_pem.encode(),
        server_key=launch.tls.private_key_pem.encode(),
        runtime_descriptor=encode(descriptor),
        auth=launch.bundle.supervisor_json,
        restart_metadata=encode(restart),
    )


def read_restart_metadata(data: bytes, where: str = "restart-metadata.json") -> RestartMetadata:
    """The metadata a start reads back from the supervisor, checked as it was written:
    FailedPrecondition naming the file (and the field's path, never a value) otherwise."""
    try:
        meta = msgspec.json.decode(data, type=RestartMetadata)
    except msgspec.ValidationError as exc:
        raise FailedPrecondition(f"{where}: {exc}") from None
    except msgspec.DecodeError:
        raise FailedPrecondition(f"{where}: not valid JSON") from None
    if not meta.generation:
        raise FailedPrecondition(f"{where}: generation is empty")
    ident = meta.workload_identity
    checked = workload_identity(ident.uid, ident.gid, ident.supplementary_gids, ident.source, ident.resource_digest)
    if checked != ident:
        raise FailedPrecondition(f"{where}: workload_identity is not normalised (supplementary_gids)")
    return meta
