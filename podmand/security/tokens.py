"""The gateway's JWTs and launch-authentication bundle, decoded but never verified.

The gateway signs sandbox tokens and hands podmand a bundle of session
credentials; podmand only passes them on to the supervisor. Checking their
shape here (right sandbox, not expired, well-formed bundle) turns a gateway or
wiring mistake into an INVALID_ARGUMENT at create time instead of a supervisor
that cannot authenticate minutes later. Signatures are the supervisor's and the
gateway's business, so none are checked.

The launch bundle's ``supervisor`` object is kept twice: decoded (the fields podmand
checks and uses) and as the exact JSON bytes the gateway sent (``supervisor_json``),
which become the split topology's ``auth.json`` verbatim (see :class:`SupervisorAuth`).

No error raised here ever contains a token, a claim value or bundle contents.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
import uuid

import msgspec

from ..errors import DriverError, InvalidArgument

__all__ = [
    "GENERATION_RE",
    "JwtHeader",
    "LaunchAuthentication",
    "SandboxClaims",
    "SupervisorAuth",
    "VerificationKey",
    "check_generation",
    "check_sandbox_token",
    "decode_launch_authentication",
]

GENERATION_RE = re.compile(r"[a-z0-9-]{1,64}")
"""A runtime generation ID: 1-64 characters of ``[a-z0-9-]`` (use ``fullmatch``)."""

SPIFFE_PREFIX = "spiffe://openshell/sandbox/"

_SEGMENT_RE = re.compile(r"[A-Za-z0-9_-]+")
_WHITESPACE_RE = re.compile(r"\s")
_I64_MAX = 2**63 - 1
_U64_MAX = 2**64 - 1


class JwtHeader(msgspec.Struct):
    """The JOSE header; only the fields podmand looks at."""

    alg: str
    kid: str = ""
    typ: str = ""


class SandboxClaims(msgspec.Struct):
    """Claims of the legacy sandbox JWT and of the session JWTs; extra claims are ignored."""

    sub: str = ""
    iss: str = ""
    aud: str | list[str] = ""
    iat: int = 0
    exp: int = 0
    sandbox_id: str = ""
    jti: str = ""
    runtime_generation: str = ""
    auth_epoch: int = 0
    component: str = ""


def _segment(where: str, name: str, segment: str) -> bytes:
    """Decode one unpadded base64url JWT segment."""
    if not _SEGMENT_RE.fullmatch(segment):
        raise InvalidArgument(f"{where}: JWT {name} is not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise InvalidArgument(f"{where}: JWT {name} is not valid base64url") from None


def _json_error(exc: Exception) -> str:
    """A msgspec error as text that is safe to show: validation paths only, never input."""
    if isinstance(exc, msgspec.ValidationError):
        return str(exc)
    return "not valid JSON"


def check_sandbox_token(
    token: str, sandbox_id: str, *, where: str = "sandbox.spec.sandbox_token", now: float | None = None
) -> SandboxClaims:
    """Decode a gateway JWT and check it is for ``sandbox_id`` and not expired; return its claims."""
    parts = token.strip().split(".")
    if len(parts) != 3 or not all(parts):
        raise InvalidArgument(f"{where}: not a JWT (expected three non-empty dot-separated segments)")
    header_raw = _segment(where, "header", parts[0])
    claims_raw = _segment(where, "claims", parts[1])
    _segment(where, "signature", parts[2])

    try:
        header = msgspec.json.decode(header_raw, type=JwtHeader)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidArgument(f"{where}: JWT header is invalid: {_json_error(exc)}") from None
    if not header.alg:
        raise InvalidArgument(f"{where}: JWT header has an empty alg")
    if header.alg.lower() == "none":
        raise InvalidArgument(f"{where}: JWT header alg 'none' is not allowed")

    try:
        claims = msgspec.json.decode(claims_raw, type=SandboxClaims)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidArgument(f"{where}: JWT claims are invalid: {_json_error(exc)}") from None

    if not claims.sub and not claims.sandbox_id:
        raise InvalidArgument(f"{where}: JWT has neither a sub nor a sandbox_id claim")
    if claims.sub and claims.sub != SPIFFE_PREFIX + sandbox_id:
        raise InvalidArgument(f"{where}: claim sub names another sandbox")
    if claims.sandbox_id and claims.sandbox_id != sandbox_id:
        raise InvalidArgument(f"{where}: claim sandbox_id names another sandbox")
    if claims.exp != 0:
        current = time.time() if now is None else now
        if claims.exp <= current:
            raise InvalidArgument(f"{where}: claim exp is in the past (token expired)")
    return claims


def check_generation(where: str, value: str) -> None:
    """Raise InvalidArgument unless ``value`` is a valid runtime generation ID."""
    if not value:
        raise InvalidArgument(f"{where}: generation ID is required")
    if len(value) > 64:
        raise InvalidArgument(f"{where}: generation ID exceeds 64 characters")
    if not GENERATION_RE.fullmatch(value):
        raise InvalidArgument(f"{where}: generation ID contains an unsupported character (allowed: a-z, 0-9, '-')")


class SupervisorAuth(msgspec.Struct):
    """The supervisor's half of the bundle: its session and both bearer tokens.

    Unknown fields are allowed here, unlike everywhere else in the bundle. A newer
    gateway adds fields to this object (``ssh_host_private_key``, contract §9) for a
    supervisor of its own release, which decodes ``auth.json`` strictly; podmand only
    carries the object from one to the other, so it checks the fields it reads and
    copies the whole object as sent (``LaunchAuthentication.supervisor_json``), instead
    of refusing, or silently dropping, what the two ends agree on. The rest of the
    bundle stays strict: podmand re-encodes ``gateway_id`` and ``verification_keys``
    into ``bootstrap.json`` itself, so a top-level field it does not know could not
    reach the runtime as sent.

    Its repr leaves the tokens out (a struct in a log line or traceback must not
    carry them)."""

    session_id: str
    runtime_generation: str
    session_rotation: int
    auth_epoch: int
    gateway_token: str
    gateway_expires_at: int
    sandbox_token: str
    sandbox_expires_at: int

    def __repr__(self) -> str:
        return (
            f"SupervisorAuth(session_id={self.session_id!r}, runtime_generation={self.runtime_generation!r}, "
            f"session_rotation={self.session_rotation}, auth_epoch={self.auth_epoch}, tokens=<redacted>)"
        )


class VerificationKey(msgspec.Struct, forbid_unknown_fields=True):
    """A gateway public key; the PEM travels as a JSON array of byte values."""

    key_id: str
    public_key_pem: list[int]

    @property
    def pem(self) -> str:
        """The PEM as text (validated as UTF-8 at decode)."""
        return bytes(self.public_key_pem).decode("utf-8")


class _Wire(msgspec.Struct, forbid_unknown_fields=True):
    """``SandboxLaunchAuthentication`` as the gateway serialises it."""

    supervisor: SupervisorAuth
    gateway_id: str
    verification_keys: list[VerificationKey]


class _SupervisorBytes(msgspec.Struct):
    """The same document, read only for the supervisor object's own bytes."""

    supervisor: msgspec.Raw


class LaunchAuthentication(msgspec.Struct, frozen=True):
    """A decoded, validated launch bundle (:func:`decode_launch_authentication` makes it).

    ``supervisor_json`` is the ``supervisor`` object exactly as the gateway sent it
    (bytes of the request, not re-encoded): the split topology's ``auth.json``."""

    supervisor: SupervisorAuth
    gateway_id: str
    verification_keys: list[VerificationKey]
    supervisor_json: bytes

    def __repr__(self) -> str:
        keys = [k.key_id for k in self.verification_keys]
        return f"LaunchAuthentication(supervisor={self.supervisor!r}, gateway_id={self.gateway_id!r}, keys={keys!r})"


def _word(where: str, path: str, value: str, refuse: type[DriverError]) -> None:
    """Require a non-empty string without whitespace."""
    if not value:
        raise refuse(f"{where}: {path} must not be empty")
    if _WHITESPACE_RE.search(value):
        raise refuse(f"{where}: {path} must not contain whitespace")


def _canonical_uuid(value: str) -> bool:
    """Whether ``value`` is a UUID in its canonical form (36 lowercase hex-and-hyphen characters)."""
    try:
        return len(value) == 36 and str(uuid.UUID(value)) == value
    except ValueError:
        return False


def _validate(bundle: _Wire, where: str, refuse: type[DriverError]) -> None:
    """The bundle rules of the contract (§2.1); messages name the field, never its value."""
    sup = bundle.supervisor
    if not _canonical_uuid(sup.session_id):
        raise refuse(f"{where}: supervisor.session_id must be a canonical UUID (lowercase, hyphenated)")
    try:
        check_generation(f"{where}: supervisor.runtime_generation", sup.runtime_generation)
    except InvalidArgument as exc:
        raise refuse(exc.message) from None
    for name, count in (("session_rotation", sup.session_rotation), ("auth_epoch", sup.auth_epoch)):
        if count < 1:
            raise refuse(f"{where}: supervisor.{name} must be at least 1")
        if count > _U64_MAX:
            raise refuse(f"{where}: supervisor.{name} is out of range")
    expiries = (("gateway_expires_at", sup.gateway_expires_at), ("sandbox_expires_at", sup.sandbox_expires_at))
    for name, expiry in expiries:  # Unix seconds; 0 means the token never expires
        if expiry < 0:
            raise refuse(f"{where}: supervisor.{name} must not be negative (0 means never)")
        if expiry > _I64_MAX:
            raise refuse(f"{where}: supervisor.{name} is out of range")
    _word(where, "supervisor.gateway_token", sup.gateway_token, refuse)
    _word(where, "supervisor.sandbox_token", sup.sandbox_token, refuse)
    _word(where, "gateway_id", bundle.gateway_id, refuse)
    if not bundle.verification_keys:
        raise refuse(f"{where}: at least one verification key is required")
    seen: set[str] = set()
    for i, key in enumerate(bundle.verification_keys):
        path = f"verification_keys[{i}]"
        _word(where, f"{path}.key_id", key.key_id, refuse)
        if key.key_id in seen:
            raise refuse(f"{where}: {path}.key_id duplicates an earlier key id")
        seen.add(key.key_id)
        if not key.public_key_pem:
            raise refuse(f"{where}: {path}.public_key_pem must not be empty")
        if any(b < 0 or b > 255 for b in key.public_key_pem):
            raise refuse(f"{where}: {path}.public_key_pem must hold byte values 0..255")
        try:
            bytes(key.public_key_pem).decode("utf-8")
        except UnicodeDecodeError:
            raise refuse(f"{where}: {path}.public_key_pem is not UTF-8 text") from None


def decode_launch_authentication(
    data: bytes, where: str, *, refuse: type[DriverError] = InvalidArgument
) -> LaunchAuthentication:
    """Decode and validate the launch bundle (JSON bytes), or raise ``refuse`` (InvalidArgument
    unless the caller says otherwise: the split topology's create and start answer
    FailedPrecondition, contract §2.1) with a message naming the field."""
    try:
        wire = msgspec.json.decode(data, type=_Wire)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise refuse(f"{where}: launch authentication is invalid: {_json_error(exc)}") from None
    _validate(wire, where, refuse)
    raw = msgspec.json.decode(data, type=_SupervisorBytes).supervisor
    return LaunchAuthentication(wire.supervisor, wire.gateway_id, wire.verification_keys, bytes(raw))
