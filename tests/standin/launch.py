"""The material of one split-topology launch, made by the test itself: real Ed25519-signed
session JWTs, a per-launch TLS authority and server certificate, and the documents each
side reads (``bootstrap.json`` for the runtime, ``runtime-descriptor.json`` and
``auth.json`` for the supervisor), shaped as the Sandbox Protocol contract says (§2).

Independent of podmand's code on purpose: the stand-ins are checked against this, and
podmand is later checked against the stand-ins. Every document is a plain dict a test
can break before writing it out.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CHANNEL = "/.openshell/channel"
SANDBOX_DIR = f"{CHANNEL}/sandbox"
BOOTSTRAP = f"{SANDBOX_DIR}/bootstrap.json"
SOCKET = f"{SANDBOX_DIR}/control.sock"
SUPERVISOR_DIR = "/.openshell/supervisor"
DESCRIPTOR = f"{SUPERVISOR_DIR}/runtime-descriptor.json"
AUTH = f"{SUPERVISOR_DIR}/auth.json"
HEALTH = "/run/openshell/supervisor-health.sock"
GUARANTEES = ["controller_loss_fails_closed", "default_deny_egress", "no_unmanaged_egress_path",
              "revocation_verified"]
NOT_BEFORE = datetime.datetime(1975, 1, 1, tzinfo=datetime.UTC)
NOT_AFTER = datetime.datetime(4096, 1, 1, tzinfo=datetime.UTC)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def pem_public(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def pem_private(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def sign_jwt(key: Ed25519PrivateKey, header: dict[str, Any], claims: dict[str, Any]) -> str:
    """A compact JWS: base64url(header).base64url(claims).base64url(Ed25519 signature)."""
    signing_input = f"{b64url(compact(header))}.{b64url(compact(claims))}"
    return f"{signing_input}.{b64url(key.sign(signing_input.encode()))}"


def drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@dataclass
class Tls:
    """A per-launch authority (its key discarded, as upstream does) and the runtime's server pair."""

    server_name: str
    anchor_pem: str
    chain_pem: str
    key_pem: bytes

    @classmethod
    def make(cls, server_name: str, san: str | None = None) -> Tls:
        ca_key = Ed25519PrivateKey.generate()
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "OpenShell sandbox session CA")])
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
              .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(NOT_BEFORE).not_valid_after(NOT_AFTER)
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                           key_encipherment=False, data_encipherment=False, key_agreement=False,
                                           key_cert_sign=True, crl_sign=True, encipher_only=False,
                                           decipher_only=False), critical=True)
              .sign(ca_key, None))
        leaf_key = Ed25519PrivateKey.generate()
        leaf = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "OpenShell sandbox runtime")]))
                .issuer_name(ca_name).public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(NOT_BEFORE).not_valid_after(NOT_AFTER)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(san or server_name)]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, None))
        pem = serialization.Encoding.PEM
        return cls(server_name, ca.public_bytes(pem).decode(), leaf.public_bytes(pem).decode(),
                   pem_private(leaf_key))


@dataclass
class Launch:
    """One launch of one sandbox, with every value both sides must agree on."""

    uid: int = 41000
    gid: int = 41000
    groups: list[int] = field(default_factory=list)
    sandbox_id: str = "sb-standin"
    gateway_id: str = "gw-test"
    kid: str = "kid-1"
    epoch: int = 1
    generation: str = field(default_factory=lambda: str(uuid.uuid4()))
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    container_id: str = field(default_factory=lambda: hashlib.sha256(uuid.uuid4().bytes).hexdigest())
    image_id: str = field(default_factory=lambda: hashlib.sha256(uuid.uuid4().bytes).hexdigest())
    key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)
    child_env: dict[str, str] = field(default_factory=lambda: {"PATH": "/usr/local/bin:/usr/bin:/bin",
                                                                "GREETING": "hello from child_env"})

    def __post_init__(self) -> None:
        self.tls = Tls.make(self.server_name)

    @property
    def server_name(self) -> str:
        return f"sandbox.{self.session_id}.openshell.internal"

    # ---------------------------------------------------------------- tokens (§2.2)
    def token(self, profile: str = "sandbox", *, key: Ed25519PrivateKey | None = None,
              header: dict[str, Any] | None = None, **claims: Any) -> str:
        """A session JWT; ``header`` and ``claims`` override (None removes a member)."""
        issuer = f"openshell-gateway:{self.gateway_id}"
        now = int(time.time())
        body = {"iss": issuer, "sub": f"spiffe://openshell/sandbox/{self.sandbox_id}",
                "aud": "openshell-sandbox" if profile == "sandbox" else issuer,
                "iat": now, "exp": now + 3600, "jti": str(uuid.uuid4()), "sandbox_id": self.sandbox_id,
                "runtime_generation": self.generation, "auth_epoch": self.epoch, "component": "openshell-supervisor"}
        head = {"alg": "EdDSA", "typ": f"openshell-{profile}-session+jwt", "kid": self.kid}
        return sign_jwt(key or self.key, drop_none({**head, **(header or {})}), drop_none({**body, **claims}))

    # ---------------------------------------------------------------- shared sub-documents (§2.4)
    def identity(self) -> dict[str, Any]:
        return {"uid": self.uid, "gid": self.gid, "supplementary_gids": sorted(set(self.groups) - {self.gid}),
                "source": "image", "resource_digest": self.image_id}

    def claims(self) -> dict[str, str]:
        return {"podman.container_id": self.container_id, "podman.image_identity": self.image_id}

    def fence(self) -> dict[str, Any]:
        native = compact({"container_id": self.container_id, "network_mode": "none", "unexpected_networks": []})
        binding = struct.pack(">Q", len(self.generation)) + self.generation.encode() + native
        return {"generation": self.generation, "established": list(GUARANTEES),
                "evidence_digest": hashlib.sha256(binding).hexdigest()}

    # ---------------------------------------------------------------- the documents
    def bootstrap(self) -> dict[str, Any]:
        return {"boundary_id": self.sandbox_id, "generation": self.generation, "session_id": self.session_id,
                "session_rotation": 1, "auth_epoch": self.epoch, "gateway_id": self.gateway_id,
                "verification_keys": [{"key_id": self.kid, "public_key_pem": pem_public(self.key)}],
                "listener": {"kind": "unix", "socket_path": SOCKET,
                             "tls": {"certificate_chain_path": f"{SANDBOX_DIR}/server.crt",
                                     "private_key_path": f"{SANDBOX_DIR}/server.key"}},
                "resource_claims": self.claims(), "resource_claim_files": {},
                "workload_identity": self.identity(), "outer_fence": self.fence(), "child_env": dict(self.child_env)}

    def descriptor(self) -> dict[str, Any]:
        return {"boundary_id": self.sandbox_id, "generation": self.generation, "session_id": self.session_id,
                "workload_identity": self.identity(), "transport": {"kind": "unix", "socket_path": SOCKET},
                "tls": {"server_name": self.server_name, "trust_anchor_pem": self.tls.anchor_pem},
                "host_gateway_ip": "127.0.0.1", "resource_claims": self.claims(), "outer_fence": self.fence()}

    def bundle(self) -> bytes:
        """This launch as the gateway sends it (``launch_authentication``, §2.1)."""
        keys = [{"key_id": self.kid, "public_key_pem": list(pem_public(self.key).encode())}]
        return compact({"supervisor": self.auth(), "gateway_id": self.gateway_id, "verification_keys": keys})

    def auth(self) -> dict[str, Any]:
        now = int(time.time())
        return {"session_id": self.session_id, "runtime_generation": self.generation, "session_rotation": 1,
                "auth_epoch": self.epoch, "gateway_token": self.token("gateway"), "gateway_expires_at": now + 3600,
                "sandbox_token": self.token("sandbox"), "sandbox_expires_at": now + 3600}
