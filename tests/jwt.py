"""JWT-shaped sandbox tokens for tests (podmand decodes claims; it never verifies)."""

from __future__ import annotations

import base64
import json
from typing import Any


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_token(sandbox_id: str, **claims: Any) -> str:
    """A legacy-profile gateway token for ``sandbox_id``; ``claims`` override or add claims."""
    body = {
        "sub": f"spiffe://openshell/sandbox/{sandbox_id}",
        "iss": "openshell-gateway:test",
        "aud": "openshell-gateway:test",
        "iat": 1_700_000_000,
        "exp": 0,
        "sandbox_id": sandbox_id,
        **claims,
    }
    header = {"alg": "EdDSA", "kid": "test"}
    return ".".join([b64(json.dumps(header).encode()), b64(json.dumps(body).encode()), b64(b"not-a-real-signature")])


def make_launch(sandbox_id: str, generation: str) -> bytes:
    """A gateway launch-authentication bundle (JSON bytes) for ``sandbox_id``."""
    bundle = {
        "supervisor": {
            "session_id": "7f0c0a52-2f43-4c5e-9a52-4b5c7b2b9d11",
            "runtime_generation": generation,
            "session_rotation": 1,
            "auth_epoch": 1,
            "gateway_token": make_token(sandbox_id, typ="gateway", runtime_generation=generation),
            "gateway_expires_at": 4_000_000_000,
            "sandbox_token": make_token(sandbox_id, aud="openshell-sandbox", runtime_generation=generation),
            "sandbox_expires_at": 4_000_000_000,
        },
        "gateway_id": "gw-test",
        "verification_keys": [{"key_id": "k1", "public_key_pem": list(b"-----BEGIN PUBLIC KEY-----\nAAAA\n")}],
    }
    return json.dumps(bundle).encode()
