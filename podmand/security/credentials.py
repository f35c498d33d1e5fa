"""podmand's own bootstrap credential, for the gateway's AuthenticateSandbox call.

A supervisor that only holds a driver-native credential presents it to the
gateway, which forwards it to the driver to learn which sandbox (and which
container instance and generation) it belongs to. The credential is an HMAC
over a small JSON payload, keyed by a 32-byte secret that podmand keeps in a
root-only file so credentials minted before a restart still verify after it.

Nothing raised here contains a credential or the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import pathlib
import re
import secrets
import stat
import time
from dataclasses import dataclass

import msgspec

from ..errors import DriverError

__all__ = ["KEY_BYTES", "PREFIX", "BadCredential", "BadKeyFile", "CredentialClaims", "CredentialSigner"]

PREFIX = "pdc1"
KEY_BYTES = 32
_MAX_CREDENTIAL = 4096
_B64URL_RE = re.compile(r"[A-Za-z0-9_-]+")


class BadKeyFile(DriverError):
    """The key file exists but is not a key: podmand must not start (and must not replace it,
    which would silently invalidate every credential minted so far)."""

    def __init__(self, path: pathlib.Path, problem: str) -> None:
        super().__init__(
            f"credential key {path} {problem}; restore it, or remove it to make a new key "
            "(credentials of existing sandboxes then stop verifying until they restart)"
        )


class BadCredential(Exception):
    """A credential that is malformed or not signed by this podmand; the message is a short reason."""


@dataclass(frozen=True)
class CredentialClaims:
    """What a valid credential vouches for."""

    sandbox_id: str
    instance: str
    generation: str
    issued_at: int


class _Payload(msgspec.Struct, forbid_unknown_fields=True):
    sid: str
    inst: str
    gen: str
    iat: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not _B64URL_RE.fullmatch(text):
        raise BadCredential("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise BadCredential("not base64url") from None


def _load_or_create_key(path: pathlib.Path) -> bytes:
    """Read the key file, creating it (0600, exclusively) on first use and tightening loose permissions."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        # Written aside and linked into place: a crash mid-write never leaves a
        # short key behind, and of two racing podmands exactly one key wins.
        key = secrets.token_bytes(KEY_BYTES)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            try:
                os.write(fd, key)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(tmp, path)
            return key
        except FileExistsError:
            pass  # another podmand won: read its key below
        finally:
            tmp.unlink(missing_ok=True)

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadKeyFile(path, "is not a regular file")
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise BadKeyFile(path, f"is not {KEY_BYTES} bytes long")
    return key


class CredentialSigner:
    """Mints and verifies ``pdc1`` credentials with a key persisted at ``key_path``."""

    def __init__(self, key_path: pathlib.Path) -> None:
        self.key_path = key_path
        self._key = _load_or_create_key(key_path)

    def _mac(self, signed: str) -> bytes:
        return hmac.new(self._key, signed.encode("ascii"), hashlib.sha256).digest()

    def mint(self, sandbox_id: str, instance: str, generation: str) -> str:
        """A credential for this sandbox instance and generation, issued now."""
        claims = {"sid": sandbox_id, "inst": instance, "gen": generation, "iat": int(time.time())}
        payload = _b64(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode("utf-8"))
        signed = f"{PREFIX}.{payload}"
        return f"{signed}.{_b64(self._mac(signed))}"

    def verify(self, credential: str) -> CredentialClaims:
        """The claims of a credential this key signed; raise BadCredential otherwise."""
        if len(credential) > _MAX_CREDENTIAL:
            raise BadCredential("credential is too long")
        parts = credential.split(".")
        if len(parts) != 3:
            raise BadCredential("credential is not three dot-separated parts")
        prefix, payload, signature = parts
        if prefix != PREFIX:
            raise BadCredential("credential has an unknown version prefix")
        raw_payload = _unb64(payload)
        mac = _unb64(signature)
        if not hmac.compare_digest(mac, self._mac(f"{prefix}.{payload}")):
            raise BadCredential("credential signature does not match")
        try:
            claims = msgspec.json.decode(raw_payload, type=_Payload)
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise BadCredential("credential payload is malformed") from None
        return CredentialClaims(claims.sid, claims.inst, claims.gen, claims.iat)
