"""The channel's per-launch TLS material (podmand/pair/tls.py, contract §2.5): what each
certificate says, read back with ``cryptography``, and a real TLS 1.3 handshake (the
supervisor's side: the trust anchor alone, the server name verified) with Python's ssl."""

from __future__ import annotations

import datetime
import ssl
import tempfile
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from podmand.pair import tls

SESSION = "7f0c0a52-2f43-4c5e-9a52-4b5c7b2b9d11"
NAME = f"sandbox.{SESSION}.openshell.internal"


@pytest.fixture(scope="module")
def material() -> tls.TlsMaterial:
    return tls.mint(SESSION)


def load(pem: str) -> x509.Certificate:
    certs = x509.load_pem_x509_certificates(pem.encode())
    assert len(certs) == 1  # one certificate per PEM: the chain is the leaf alone
    return certs[0]


def common_name(name: x509.Name) -> str:
    return str(name.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def test_the_authority(material: tls.TlsMaterial) -> None:
    ca = load(material.trust_anchor_pem)
    assert isinstance(ca.public_key(), ed25519.Ed25519PublicKey)
    assert common_name(ca.subject) == common_name(ca.issuer) == "OpenShell sandbox session CA"
    ca.verify_directly_issued_by(ca)  # self-signed
    basic = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca and basic.value.path_length is None
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign and not usage.digital_signature


def test_the_server_certificate(material: tls.TlsMaterial) -> None:
    ca, leaf = load(material.trust_anchor_pem), load(material.certificate_chain_pem)
    leaf.verify_directly_issued_by(ca)
    assert common_name(leaf.subject) == "OpenShell sandbox runtime"
    assert leaf.issuer == ca.subject
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [NAME] == [material.server_name]
    assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_the_private_key_is_the_servers_in_pkcs8(material: tls.TlsMaterial) -> None:
    """The one private key given out is the server's (PKCS#8); the authority's is gone."""
    assert material.private_key_pem.startswith("-----BEGIN PRIVATE KEY-----\n")
    key = serialization.load_pem_private_key(material.private_key_pem.encode(), None)
    assert isinstance(key, ed25519.Ed25519PrivateKey)
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    assert key.public_key().public_bytes(*raw) == load(material.certificate_chain_pem).public_key().public_bytes(*raw)
    assert key.public_key().public_bytes(*raw) != load(material.trust_anchor_pem).public_key().public_bytes(*raw)
    joined = material.trust_anchor_pem + material.certificate_chain_pem
    assert "PRIVATE KEY" not in joined


def test_validity_1975_to_4096_the_end_as_generalized_time(material: tls.TlsMaterial) -> None:
    """RFC 5280: UTCTime through 2049, GeneralizedTime after; ``cryptography`` encodes 4096 so."""
    for pem in (material.trust_anchor_pem, material.certificate_chain_pem):
        cert = load(pem)
        assert cert.not_valid_before_utc == datetime.datetime(1975, 1, 1, tzinfo=datetime.UTC)
        assert cert.not_valid_after_utc == datetime.datetime(4096, 1, 1, tzinfo=datetime.UTC)
        der = cert.public_bytes(serialization.Encoding.DER)
        assert b"\x17\x0d750101000000Z" in der  # UTCTime, 13 bytes
        assert b"\x18\x0f40960101000000Z" in der  # GeneralizedTime, 15 bytes


def test_every_mint_is_new(material: tls.TlsMaterial) -> None:
    again = tls.mint(SESSION)
    assert again.trust_anchor_pem != material.trust_anchor_pem
    assert again.private_key_pem != material.private_key_pem
    other = tls.mint("00000000-0000-4000-8000-000000000001")
    assert other.server_name == "sandbox.00000000-0000-4000-8000-000000000001.openshell.internal"


def test_repr_leaves_the_pems_out(material: tls.TlsMaterial) -> None:
    assert "BEGIN" not in repr(material) and NAME in repr(material)


def handshake(material: tls.TlsMaterial, server_name: str, trust: str) -> str:
    """A TLS 1.3 handshake in memory: the runtime's side serves the chain and key, the
    supervisor's trusts ``trust`` alone and verifies ``server_name``. The version agreed."""
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp, "server.crt"), Path(tmp, "server.key")
        cert.write_text(material.certificate_chain_pem)
        key.write_text(material.private_key_pem)
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(cert, key)
    server_ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    client_ctx.load_verify_locations(cadata=trust)
    pipes = [ssl.MemoryBIO() for _ in range(4)]
    client = client_ctx.wrap_bio(pipes[0], pipes[1], server_hostname=server_name)
    server = server_ctx.wrap_bio(pipes[2], pipes[3], server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for side, end, out, into in (("client", client, pipes[1], pipes[2]), ("server", server, pipes[3], pipes[0])):
            if not done[side]:
                try:
                    end.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
            into.write(out.read())
        if all(done.values()):
            return str(client.version())
    raise AssertionError("handshake did not finish")


def test_a_tls13_handshake_verifies(material: tls.TlsMaterial) -> None:
    assert handshake(material, NAME, material.trust_anchor_pem) == "TLSv1.3"


def test_another_name_or_another_launchs_authority_fails(material: tls.TlsMaterial) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match=r"match|mismatch"):
        handshake(material, f"sandbox.{SESSION.replace('7f', '8f')}.openshell.internal", material.trust_anchor_pem)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(material, NAME, tls.mint(SESSION).trust_anchor_pem)
