"""The launch bundle ``ctl`` mints, as a gateway does, for a driver that expects one.

A driver that does not authenticate sandboxes itself (``supports_sandbox_authentication``
false: podmand's split topology, upstream's drivers) refuses a create or start without
the gateway's ``launch_authentication`` (OpenShell 0.1.x's Sandbox Protocol). ``ctl`` is
the operator's stand-in for the gateway, so it makes one of the same shape: a fresh
Ed25519 key per bundle (its public half the only verification key, its private half
discarded), a gateway and a sandbox session JWT for the sandbox, a fresh session, a
runtime generation, epoch 1, and no expiry. The bundle lets the pair start and its two
runtimes agree; a supervisor that then dials a real gateway is refused there, as ``ctl``
is no gateway (docs/operations.md).

Never printed: ``redact`` blanks it from anything ``ctl`` echoes.
"""

from __future__ import annotations

import base64
import json
import time
import uuid

GATEWAY_ID = "podmand-ctl"
_KEY_ID = "podmand-ctl-1"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def mint(sandbox_id: str) -> bytes:
    """A launch bundle for ``sandbox_id`` (JSON bytes, the wire form of contract §2.1)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    generation, now = str(uuid.uuid4()), int(time.time())
    issuer = f"openshell-gateway:{GATEWAY_ID}"

    def token(profile: str) -> str:
        header = {"alg": "EdDSA", "typ": f"openshell-{profile}-session+jwt", "kid": _KEY_ID}
        claims = {"iss": issuer, "sub": f"spiffe://openshell/sandbox/{sandbox_id}",
                  "aud": issuer if profile == "gateway" else "openshell-sandbox", "iat": now, "exp": 0,
                  "jti": str(uuid.uuid4()), "sandbox_id": sandbox_id, "runtime_generation": generation,
                  "auth_epoch": 1, "component": "openshell-supervisor"}
        signed = f"{_b64(_compact(header))}.{_b64(_compact(claims))}"
        return f"{signed}.{_b64(key.sign(signed.encode()))}"

    supervisor = {"session_id": str(uuid.uuid4()), "runtime_generation": generation, "session_rotation": 1,
                  "auth_epoch": 1, "gateway_token": token("gateway"), "gateway_expires_at": 0,
                  "sandbox_token": token("sandbox"), "sandbox_expires_at": 0}
    keys = [{"key_id": _KEY_ID, "public_key_pem": list(public)}]
    return _compact({"supervisor": supervisor, "gateway_id": GATEWAY_ID, "verification_keys": keys})
