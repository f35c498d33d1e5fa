"""Unit tests for podmand.cli.ctl.launch: the bundle ctl mints is one a 0.1.x runtime and
supervisor accept (contract §2.1, §2.2): podmand's own strict decode takes it, and both
JWTs verify against the bundle's one key with the claims a verifier checks."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from podmand.cli.ctl import launch
from podmand.sandbox.spec import launch_bundle


def part(segment: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    return doc


def test_a_minted_bundle_decodes_strictly_and_its_tokens_verify() -> None:
    raw = launch.mint("demo-1")
    bundle = launch_bundle(raw, "demo-1", "launch_authentication")
    doc = json.loads(raw)
    [key] = doc["verification_keys"]
    public = load_pem_public_key(bytes(key["public_key_pem"]))
    assert isinstance(public, Ed25519PublicKey)
    issuer = f"openshell-gateway:{launch.GATEWAY_ID}"
    for profile, token, audience in (("gateway", bundle.supervisor.gateway_token, issuer),
                                     ("sandbox", bundle.supervisor.sandbox_token, "openshell-sandbox")):
        head, body, signature = token.split(".")
        public.verify(base64.urlsafe_b64decode(signature + "=="), f"{head}.{body}".encode())  # raises if not
        header, claims = part(head), part(body)
        assert header == {"alg": "EdDSA", "typ": f"openshell-{profile}-session+jwt", "kid": key["key_id"]}
        assert claims["iss"] == issuer and claims["aud"] == audience and claims["exp"] == 0
        assert claims["sub"] == "spiffe://openshell/sandbox/demo-1" and claims["sandbox_id"] == "demo-1"
        assert claims["runtime_generation"] == bundle.supervisor.runtime_generation and claims["auth_epoch"] == 1
        assert str(uuid.UUID(claims["jti"])) == claims["jti"]
    again = launch_bundle(launch.mint("demo-1"), "demo-1", "launch_authentication")
    assert again.supervisor.session_id != bundle.supervisor.session_id, "a fresh session per bundle"
