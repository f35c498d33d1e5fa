"""Unit tests for podmand.security.tokens: JWT shape checks and the launch-authentication bundle."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from podmand.errors import FailedPrecondition, InvalidArgument
from podmand.security import tokens

SANDBOX = "sbx-1234"
OTHER = "sbx-9999"
NOW = 1_700_000_000.0
WHERE = "sandbox.spec.sandbox_token"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def jwt(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"\x01fake-signature\xff") -> str:
    """A JWT-shaped string with JSON header and claims and an arbitrary signature."""
    return ".".join([b64(json.dumps(header).encode()), b64(json.dumps(claims).encode()), b64(signature)])


def legacy_claims(**over: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "sub": f"spiffe://openshell/sandbox/{SANDBOX}",
        "iss": "openshell-gateway:gw-1",
        "aud": "openshell-gateway:gw-1",
        "iat": int(NOW) - 10,
        "exp": 0,
        "sandbox_id": SANDBOX,
    }
    claims.update(over)
    return claims


def session_claims(**over: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "iss": "openshell-gateway:gw-1",
        "sub": f"spiffe://openshell/sandbox/{SANDBOX}",
        "aud": "openshell-gateway:gw-1",
        "iat": int(NOW) - 10,
        "exp": int(NOW) + 600,
        "jti": "6f1c1b7e-3d1f-4a7e-9b5a-0e1f2a3b4c5d",
        "sandbox_id": SANDBOX,
        "runtime_generation": "g00000000000000a1",
        "auth_epoch": 3,
        "component": "openshell-supervisor",
    }
    claims.update(over)
    return claims


LEGACY_HEADER = {"alg": "EdDSA", "kid": "a1b2c3d4"}
SESSION_HEADER = {"alg": "EdDSA", "kid": "a1b2c3d4", "typ": "openshell-gateway-session+jwt"}


def rejected(token: str, match: str, sandbox_id: str = SANDBOX) -> InvalidArgument:
    with pytest.raises(InvalidArgument, match=match) as info:
        tokens.check_sandbox_token(token, sandbox_id, now=NOW)
    message = info.value.message
    assert message.startswith(f"{WHERE}: ")
    assert token.strip() not in message
    for part in token.strip().split("."):
        if part:
            assert part not in message
    return info.value


# ---------------------------------------------------------------- JWT: accepted


def test_legacy_token_decodes() -> None:
    """The legacy sandbox JWT (kid, no typ, exp 0 = non-expiring) is accepted and its claims returned."""
    claims = tokens.check_sandbox_token(jwt(LEGACY_HEADER, legacy_claims()), SANDBOX, now=NOW)
    assert claims.sandbox_id == SANDBOX
    assert claims.exp == 0
    assert claims.aud == "openshell-gateway:gw-1"
    assert claims.jti == "" and claims.auth_epoch == 0


def test_session_token_decodes() -> None:
    """The session profile with jti, generation, epoch and component is accepted."""
    claims = tokens.check_sandbox_token(jwt(SESSION_HEADER, session_claims()), SANDBOX, now=NOW)
    assert claims.runtime_generation == "g00000000000000a1"
    assert claims.auth_epoch == 3
    assert claims.component == "openshell-supervisor"
    assert claims.exp == int(NOW) + 600


def test_sandbox_profile_audience_list_and_extra_claims() -> None:
    """An audience list and unknown extra claims are fine; surrounding whitespace is stripped."""
    token = jwt({"alg": "EdDSA", "typ": "openshell-sandbox-session+jwt"},
                session_claims(aud=["openshell-sandbox"], extra="ignored"))
    claims = tokens.check_sandbox_token(f"  {token}\n", SANDBOX, now=NOW)
    assert claims.aud == ["openshell-sandbox"]


def test_only_sub_or_only_sandbox_id_is_enough() -> None:
    only_sub = legacy_claims()
    del only_sub["sandbox_id"]
    only_id = legacy_claims()
    del only_id["sub"]
    assert tokens.check_sandbox_token(jwt(LEGACY_HEADER, only_sub), SANDBOX, now=NOW).sandbox_id == ""
    assert tokens.check_sandbox_token(jwt(LEGACY_HEADER, only_id), SANDBOX, now=NOW).sub == ""


def test_default_now_is_wall_clock() -> None:
    """Without ``now`` a token expiring far in the future passes and one from 2001 does not."""
    tokens.check_sandbox_token(jwt(SESSION_HEADER, session_claims(exp=4_000_000_000)), SANDBOX)
    with pytest.raises(InvalidArgument, match="exp"):
        tokens.check_sandbox_token(jwt(SESSION_HEADER, session_claims(exp=1_000_000_000)), SANDBOX)


def test_custom_where_prefixes_errors() -> None:
    with pytest.raises(InvalidArgument, match=r"^start\.token: "):
        tokens.check_sandbox_token("x.y", SANDBOX, where="start.token")


# ---------------------------------------------------------------- JWT: rejected


@pytest.mark.parametrize("token", ["abc.def", "a.b.c.d", "abc..def", ".abc.def", "", "   "])
def test_wrong_segment_count_or_empty_segment(token: str) -> None:
    with pytest.raises(InvalidArgument, match="three non-empty"):
        tokens.check_sandbox_token(token, SANDBOX, now=NOW)


def test_bad_base64_characters() -> None:
    good = jwt(LEGACY_HEADER, legacy_claims())
    h, c, s = good.split(".")
    rejected(f"{h}.{c[:-2]}+/.{s}", "claims is not unpadded base64url")
    rejected(f"{h}=.{c}.{s}", "header is not unpadded base64url")
    rejected(f"{h}.{c}.{s} x", "signature is not unpadded base64url")


def test_impossible_base64_length() -> None:
    """Five base64 characters cannot encode whole bytes."""
    good = jwt(LEGACY_HEADER, legacy_claims())
    h, _, s = good.split(".")
    rejected(f"{h}.abcde.{s}", "claims is not valid base64url")


def test_header_not_json() -> None:
    good = jwt(LEGACY_HEADER, legacy_claims())
    _, c, s = good.split(".")
    rejected(f"{b64(b'{not json secret-ish')}.{c}.{s}", "header is invalid: not valid JSON")


def test_header_without_alg() -> None:
    rejected(jwt({"kid": "k"}, legacy_claims()), "header is invalid.*alg")


def test_header_empty_alg() -> None:
    rejected(jwt({"alg": ""}, legacy_claims()), "empty alg")


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_alg_none(alg: str) -> None:
    rejected(jwt({"alg": alg}, legacy_claims()), "alg 'none'")


def test_header_not_an_object() -> None:
    rejected(jwt(["EdDSA"], legacy_claims()), "header is invalid")  # type: ignore[arg-type]


def test_claims_not_an_object() -> None:
    rejected(jwt(LEGACY_HEADER, [SANDBOX]), "claims are invalid")  # type: ignore[arg-type]


def test_claim_of_wrong_type_does_not_echo_value() -> None:
    err = rejected(jwt(LEGACY_HEADER, legacy_claims(exp="topsecret-exp")), r"claims are invalid.*\$\.exp")
    assert "topsecret" not in err.message


def test_sub_for_another_sandbox() -> None:
    err = rejected(jwt(LEGACY_HEADER, legacy_claims(sub=f"spiffe://openshell/sandbox/{OTHER}")),
                   "claim sub names another sandbox")
    assert OTHER not in err.message


def test_sub_without_spiffe_prefix() -> None:
    rejected(jwt(LEGACY_HEADER, legacy_claims(sub=SANDBOX)), "claim sub names another sandbox")


def test_sandbox_id_mismatch() -> None:
    err = rejected(jwt(SESSION_HEADER, session_claims(sandbox_id=OTHER)), "claim sandbox_id names another sandbox")
    assert OTHER not in err.message


def test_token_for_other_sandbox_checked_against_request() -> None:
    """A perfectly good token for sandbox A does not pass for sandbox B; B's id is not echoed either."""
    err = rejected(jwt(LEGACY_HEADER, legacy_claims()), "claim sub names another sandbox", sandbox_id=OTHER)
    assert SANDBOX not in err.message


def test_neither_sub_nor_sandbox_id() -> None:
    claims = legacy_claims()
    del claims["sub"], claims["sandbox_id"]
    rejected(jwt(LEGACY_HEADER, claims), "neither a sub nor a sandbox_id")


@pytest.mark.parametrize("exp", [int(NOW), int(NOW) - 1, -5])
def test_expired(exp: int) -> None:
    err = rejected(jwt(SESSION_HEADER, session_claims(exp=exp)), "claim exp is in the past")
    assert str(exp) not in err.message


# ---------------------------------------------------------------- generation IDs


@pytest.mark.parametrize("value", ["g0123456789abcdef", "a", "0-1-z", "x" * 64])
def test_generation_accepted(value: str) -> None:
    tokens.check_generation("gen", value)
    assert tokens.GENERATION_RE.fullmatch(value)


@pytest.mark.parametrize(("value", "match"), [
    ("", "required"),
    ("x" * 65, "exceeds 64"),
    ("G01", "unsupported character"),
    ("g_1", "unsupported character"),
    ("g1\n", "unsupported character"),
    ("g 1", "unsupported character"),
])
def test_generation_rejected(value: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=f"^gen: .*{match}"):
        tokens.check_generation("gen", value)


# ---------------------------------------------------------------- launch bundle

PEM = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAabc=\n-----END PUBLIC KEY-----\n"
GW_TOKEN = jwt(SESSION_HEADER, session_claims())
SBX_TOKEN = jwt({"alg": "EdDSA", "typ": "openshell-sandbox-session+jwt"}, session_claims(aud="openshell-sandbox"))
BUNDLE_WHERE = "sandbox.spec.launch_authentication"


def bundle_doc() -> dict[str, Any]:
    return {
        "supervisor": {
            "session_id": "0b7d3f0e-5c1e-4c61-8f0f-2f5d7c1b9a10",
            "runtime_generation": "g00000000000000a1",
            "session_rotation": 1,
            "auth_epoch": 2,
            "gateway_token": GW_TOKEN,
            "gateway_expires_at": int(NOW) + 3600,
            "sandbox_token": SBX_TOKEN,
            "sandbox_expires_at": int(NOW) + 3600,
        },
        "gateway_id": "gw-1",
        "verification_keys": [
            {"key_id": "k1", "public_key_pem": list(PEM.encode())},
            {"key_id": "k2", "public_key_pem": list(b"-----BEGIN PUBLIC KEY-----\nxyz\n-----END PUBLIC KEY-----\n")},
        ],
    }


def encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def bundle_rejected(doc: dict[str, Any] | bytes, match: str) -> str:
    data = doc if isinstance(doc, bytes) else encode(doc)
    with pytest.raises(InvalidArgument, match=match) as info:
        tokens.decode_launch_authentication(data, BUNDLE_WHERE)
    message = info.value.message
    assert message.startswith(f"{BUNDLE_WHERE}: ")
    for secret in (GW_TOKEN, SBX_TOKEN, PEM, *GW_TOKEN.split("."), *SBX_TOKEN.split(".")):
        assert secret not in message
    return message


def test_bundle_accepted() -> None:
    bundle = tokens.decode_launch_authentication(encode(bundle_doc()), BUNDLE_WHERE)
    assert bundle.gateway_id == "gw-1"
    assert bundle.supervisor.auth_epoch == 2
    assert bundle.supervisor.gateway_token == GW_TOKEN
    assert [k.key_id for k in bundle.verification_keys] == ["k1", "k2"]
    assert bytes(bundle.verification_keys[0].public_key_pem).decode() == PEM


def mutate(path: str, value: Any) -> dict[str, Any]:
    """A copy of the good bundle with one dotted path set (``-`` deletes, digits index lists)."""
    doc = copy.deepcopy(bundle_doc())
    *parents, last = path.split(".")
    target: Any = doc
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    key: Any = int(last) if last.isdigit() else last
    if value == "-":
        del target[key]
    else:
        target[key] = value
    return doc


@pytest.mark.parametrize(("path", "value", "match"), [
    ("supervisor.gateway_expires_at", -1, "supervisor.gateway_expires_at must not be negative"),
    ("supervisor.sandbox_expires_at", -(2**63), "supervisor.sandbox_expires_at must not be negative"),
    ("supervisor.session_id", "", "supervisor.session_id must be a canonical UUID"),
    ("supervisor.session_id", "7F0C0A52-2F43-4C5E-9A52-4B5C7B2B9D11", "supervisor.session_id must be a canonical"),
    ("supervisor.session_id", "7f0c0a522f434c5e9a524b5c7b2b9d11", "supervisor.session_id must be a canonical"),
    ("supervisor.session_id", "{7f0c0a52-2f43-4c5e-9a52-4b5c7b2b9d11}", "supervisor.session_id must be a canonical"),
    ("supervisor.session_id", "urn:uuid:7f0c0a52-2f43-4c5e-9a52-4b5c7b2b9d11", "supervisor.session_id must be"),
    ("supervisor.session_id", GW_TOKEN, "supervisor.session_id must be a canonical"),
    ("supervisor.gateway_expires_at", 2**63, "supervisor.gateway_expires_at is out of range"),
    ("supervisor.runtime_generation", "", "supervisor.runtime_generation: generation ID is required"),
    ("supervisor.runtime_generation", "Bad_Gen", "supervisor.runtime_generation: .*unsupported character"),
    ("supervisor.runtime_generation", "g" * 65, "supervisor.runtime_generation: .*exceeds 64"),
    ("supervisor.session_rotation", 0, "supervisor.session_rotation must be at least 1"),
    ("supervisor.auth_epoch", 0, "supervisor.auth_epoch must be at least 1"),
    ("supervisor.auth_epoch", 2**64, "supervisor.auth_epoch is out of range"),
    ("supervisor.gateway_token", "", "supervisor.gateway_token must not be empty"),
    ("supervisor.sandbox_token", "", "supervisor.sandbox_token must not be empty"),
    ("supervisor.gateway_token", GW_TOKEN + " x", "supervisor.gateway_token must not contain whitespace"),
    ("supervisor.sandbox_token", SBX_TOKEN + "\n", "supervisor.sandbox_token must not contain whitespace"),
    ("gateway_id", "", "gateway_id must not be empty"),
    ("gateway_id", "gw 1", "gateway_id must not contain whitespace"),
    ("verification_keys", [], "at least one verification key is required"),
    ("verification_keys.0.key_id", "", r"verification_keys\[0\].key_id must not be empty"),
    ("verification_keys.1.key_id", "k\t2", r"verification_keys\[1\].key_id must not contain whitespace"),
    ("verification_keys.1.key_id", "k1", r"verification_keys\[1\].key_id duplicates"),
    ("verification_keys.0.public_key_pem", [], r"verification_keys\[0\].public_key_pem must not be empty"),
    ("verification_keys.0.public_key_pem", [45, 256], r"verification_keys\[0\].public_key_pem must hold byte values"),
    ("verification_keys.0.public_key_pem", [45, -1], r"verification_keys\[0\].public_key_pem must hold byte values"),
    ("verification_keys.0.public_key_pem", [0xFF, 0xFE], r"verification_keys\[0\].public_key_pem is not UTF-8"),
])
def test_bundle_field_rules(path: str, value: Any, match: str) -> None:
    bundle_rejected(mutate(path, value), match)


@pytest.mark.parametrize(("path", "value", "match"), [
    ("supervisor.auth_epoch", "-", "missing required field `auth_epoch`"),
    ("supervisor.auth_epoch", "3", r"Expected `int`, got `str` - at `\$.supervisor.auth_epoch`"),
    ("supervisor.session_rotation", True, r"got `bool`"),
    ("supervisor.gateway_token", 5, r"\$.supervisor.gateway_token"),
    ("extra", 1, "unknown field `extra`"),
    ("verification_keys.0.comment", "x", "unknown field `comment`"),
    ("verification_keys.0.public_key_pem", PEM, r"Expected `array`, got `str`"),
    ("verification_keys.0.public_key_pem", [1.5], r"public_key_pem\[0\]"),
    ("gateway_id", "-", "missing required field `gateway_id`"),
])
def test_bundle_shape_errors(path: str, value: Any, match: str) -> None:
    bundle_rejected(mutate(path, value), match)


def test_bundle_type_error_does_not_echo_token() -> None:
    """A token placed where a number belongs is named by path only."""
    message = bundle_rejected(mutate("supervisor.auth_epoch", GW_TOKEN), r"\$.supervisor.auth_epoch")
    assert "eyJ" not in message


@pytest.mark.parametrize("data", [
    b"",
    b"not json " + GW_TOKEN.encode(),
    encode(bundle_doc())[:-40],
    b'{"supervisor": {"gateway_token": "' + GW_TOKEN.encode() + b'" ',
    b"[1, 2, 3]",
    b"\xff\xfe",
])
def test_bundle_not_json_is_not_echoed(data: bytes) -> None:
    message = bundle_rejected(data, "launch authentication is invalid")
    assert "eyJ" not in message


def test_every_rejection_carries_where() -> None:
    """Callers pick the field name used in messages (create vs start)."""
    checks: list[Callable[[], object]] = [
        lambda: tokens.decode_launch_authentication(b"{}", "start.launch_authentication"),
        lambda: tokens.decode_launch_authentication(encode(mutate("gateway_id", "")), "start.launch_authentication"),
    ]
    for check in checks:
        with pytest.raises(InvalidArgument, match=r"^start\.launch_authentication: "):
            check()


def test_structs_round_trip_through_msgspec() -> None:
    """The decoded parts encode back to the gateway's shape (PEM as a number array)."""
    bundle = tokens.decode_launch_authentication(encode(bundle_doc()), BUNDLE_WHERE)
    parts = {"supervisor": bundle.supervisor, "gateway_id": bundle.gateway_id,
             "verification_keys": bundle.verification_keys}
    assert json.loads(msgspec.json.encode(parts)) == bundle_doc()


@pytest.mark.parametrize("expiry", [0, 1, 2**63 - 1])
def test_expiries_zero_means_never(expiry: int) -> None:
    """0 is the gateway's "never expires" (contract §2.1): accepted, as is any i64 above it."""
    doc = mutate("supervisor.gateway_expires_at", expiry)
    doc["supervisor"]["sandbox_expires_at"] = expiry
    bundle = tokens.decode_launch_authentication(encode(doc), BUNDLE_WHERE)
    assert bundle.supervisor.gateway_expires_at == bundle.supervisor.sandbox_expires_at == expiry


def test_supervisor_object_is_kept_as_sent() -> None:
    """The supervisor object's own bytes are kept, spacing, order and fields podmand does not
    know included (a newer gateway's ``ssh_host_private_key``, contract §9): they become
    auth.json. The top level and the keys stay strict."""
    supervisor = (b'{ "ssh_host_private_key" : "-----BEGIN OPENSSH PRIVATE KEY-----\\nAAAA\\n",\n'
                  b' "sandbox_expires_at": 0, "gateway_expires_at": 0, "session_id": '
                  b'"0b7d3f0e-5c1e-4c61-8f0f-2f5d7c1b9a10", "runtime_generation": "g1", "session_rotation": 1,'
                  b' "auth_epoch": 1, "gateway_token": "' + GW_TOKEN.encode() + b'", "sandbox_token": "'
                  + SBX_TOKEN.encode() + b'", "future": {"nested": [1, 2.5, null]}}')
    rest = encode({k: v for k, v in bundle_doc().items() if k != "supervisor"})
    data = b'{"supervisor":' + supervisor + b", " + rest[1:]
    bundle = tokens.decode_launch_authentication(data, BUNDLE_WHERE)
    assert bundle.supervisor_json == supervisor
    assert bundle.supervisor.gateway_token == GW_TOKEN and bundle.supervisor.runtime_generation == "g1"
    with pytest.raises(InvalidArgument, match="unknown field `extra`"):
        tokens.decode_launch_authentication(data[:-1] + b', "extra": 1}', BUNDLE_WHERE)


def test_refusal_class_is_the_callers() -> None:
    """The split topology refuses a bad bundle FAILED_PRECONDITION (contract §2.1), every rule alike."""
    for doc in (b"{}", encode(mutate("gateway_id", "")), encode(mutate("supervisor.runtime_generation", "A")),
                encode(mutate("supervisor.session_id", "x"))):
        with pytest.raises(FailedPrecondition, match=r"^start\.launch_authentication: "):
            tokens.decode_launch_authentication(doc, "start.launch_authentication", refuse=FailedPrecondition)


def test_repr_leaves_the_tokens_out() -> None:
    bundle = tokens.decode_launch_authentication(encode(bundle_doc()), BUNDLE_WHERE)
    shown = repr(bundle) + repr(bundle.supervisor) + str(bundle)
    for secret in (GW_TOKEN, SBX_TOKEN, *GW_TOKEN.split("."), *SBX_TOKEN.split(".")):
        assert secret not in shown
    assert "0b7d3f0e-5c1e-4c61-8f0f-2f5d7c1b9a10" in shown
