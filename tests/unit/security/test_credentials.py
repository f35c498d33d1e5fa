"""Unit tests for podmand.security.credentials: the HMAC bootstrap credential and its key file."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import stat
import time

import pytest

from podmand.errors import DriverError
from podmand.security.credentials import KEY_BYTES, BadCredential, CredentialClaims, CredentialSigner


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.fixture
def signer(tmp_path: pathlib.Path) -> CredentialSigner:
    return CredentialSigner(tmp_path / "keys" / "credential.key")


def test_round_trip(signer: CredentialSigner) -> None:
    before = int(time.time())
    cred = signer.mint("sbx-1", "c0ffee", "g0000000000000001")
    claims = signer.verify(cred)
    assert claims.sandbox_id == "sbx-1"
    assert claims.instance == "c0ffee"
    assert claims.generation == "g0000000000000001"
    assert before <= claims.issued_at <= int(time.time())
    assert claims == CredentialClaims("sbx-1", "c0ffee", "g0000000000000001", claims.issued_at)


def test_credential_format(signer: CredentialSigner) -> None:
    """pdc1.<payload>.<sig>, unpadded base64url, payload canonical JSON, 32-byte MAC."""
    cred = signer.mint("sbx-1", "inst", "gen")
    prefix, payload, sig = cred.split(".")
    assert prefix == "pdc1"
    assert "=" not in cred
    raw = unb64(payload)
    doc = json.loads(raw)
    assert list(doc) == ["gen", "iat", "inst", "sid"]
    assert raw == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    assert len(unb64(sig)) == 32


def test_tampered_payload(signer: CredentialSigner) -> None:
    cred = signer.mint("sbx-1", "inst", "gen")
    prefix, payload, sig = cred.split(".")
    doc = json.loads(unb64(payload))
    doc["sid"] = "sbx-2"
    forged = f"{prefix}.{b64(json.dumps(doc, sort_keys=True, separators=(',', ':')).encode())}.{sig}"
    with pytest.raises(BadCredential, match="signature") as info:
        signer.verify(forged)
    assert forged not in str(info.value) and sig not in str(info.value)


def test_tampered_signature(signer: CredentialSigner) -> None:
    cred = signer.mint("sbx-1", "inst", "gen")
    prefix, payload, sig = cred.split(".")
    raw = bytearray(unb64(sig))
    raw[0] ^= 1
    with pytest.raises(BadCredential, match="signature"):
        signer.verify(f"{prefix}.{payload}.{b64(bytes(raw))}")
    with pytest.raises(BadCredential, match="signature"):
        signer.verify(f"{prefix}.{payload}.{b64(bytes(raw[:16]))}")


def test_other_key_rejects(tmp_path: pathlib.Path) -> None:
    one = CredentialSigner(tmp_path / "a.key")
    two = CredentialSigner(tmp_path / "b.key")
    cred = one.mint("sbx-1", "inst", "gen")
    with pytest.raises(BadCredential, match="signature"):
        two.verify(cred)
    assert one.verify(cred).sandbox_id == "sbx-1"


def test_key_file_mode_and_persistence(tmp_path: pathlib.Path) -> None:
    """The key is created 0600 (and its directory) and reused by a later signer on the same path."""
    path = tmp_path / "state" / "nested" / "credential.key"
    first = CredentialSigner(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_bytes()) == KEY_BYTES
    key = path.read_bytes()
    cred = first.mint("sbx-1", "inst", "gen")
    second = CredentialSigner(path)
    assert path.read_bytes() == key
    assert second.verify(cred).sandbox_id == "sbx-1"
    assert first.verify(second.mint("sbx-2", "inst", "gen")).sandbox_id == "sbx-2"


def test_loose_permissions_are_tightened(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "credential.key"
    CredentialSigner(path)
    key = path.read_bytes()
    os.chmod(path, 0o644)
    CredentialSigner(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == key


def test_short_key_file_is_an_error_without_contents(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "credential.key"
    path.write_bytes(b"short-secret")
    with pytest.raises(DriverError, match="32 bytes") as info:
        CredentialSigner(path)
    assert "short-secret" not in info.value.message


def test_symlinked_key_is_refused(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "real.key"
    CredentialSigner(target)
    link = tmp_path / "link.key"
    link.symlink_to(target)
    with pytest.raises(OSError):
        CredentialSigner(link)


@pytest.mark.parametrize("credential", [
    "",
    "pdc1",
    "pdc1.abc",
    "pdc1.a.b.c",
    "pdc2.eyJ9.AAAA",
    "pdc1.not base64!.AAAA",
    "pdc1.abcde.AAAA",
    "pdc1..AAAA",
    "pdc1.eyJ9.",
    "pdc1.é.AAAA",
    "pdc1." + "A" * 5000 + ".AAAA",
])
def test_malformed(signer: CredentialSigner, credential: str) -> None:
    with pytest.raises(BadCredential) as info:
        signer.verify(credential)
    reason = str(info.value)
    assert reason
    if len(credential) > 6:
        assert credential not in reason


def test_signed_but_malformed_payload(signer: CredentialSigner) -> None:
    """A payload that is validly signed but not the expected JSON is still refused."""
    for body in (b"[]", b"{}", b'{"sid":"a","inst":"b","gen":"c","iat":"x"}', b"not json"):
        payload = b64(body)
        signed = f"pdc1.{payload}"
        cred = f"{signed}.{b64(signer._mac(signed))}"
        with pytest.raises(BadCredential, match="payload is malformed"):
            signer.verify(cred)


def test_key_is_created_whole_and_kept(tmp_path: pathlib.Path) -> None:
    """The key appears complete or not at all (written aside, linked into place); a later
    start reads the same key, and no temporary file is left."""
    path = tmp_path / "state" / "credential.key"
    first = CredentialSigner(path)
    assert path.stat().st_size == KEY_BYTES and oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == ["credential.key"]
    second = CredentialSigner(path)
    token = first.mint("sb", "inst", "g1")
    assert second.verify(token).sandbox_id == "sb"
