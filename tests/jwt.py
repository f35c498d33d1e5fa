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
