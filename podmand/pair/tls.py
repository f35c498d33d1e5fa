"""The channel's per-launch TLS material: a fresh authority and one server certificate.

The supervisor dials the workload runtime's control socket over TLS 1.3 and trusts
exactly one authority for it: the one made here for this launch (contract §2.5,
§8.2). The authority is an Ed25519 key and a self-signed certificate (CA:true,
KeyCertSign and CRLSign); it signs one Ed25519 server certificate for
``sandbox.<session_id>.openshell.internal`` (serverAuth), and its private key is
then dropped: nothing can sign another certificate the supervisor would trust. Every
mint has a new session id (create and every start), so every launch rotates all of it.

Both certificates are valid from 1975-01-01 to 4096-01-01, as upstream makes them:
the bearer JWT on every call, not certificate time, limits a session (§8.3). The
``cryptography`` package makes them; it is imported only here, when material is
made, so serve's start-up imports do not grow.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from .. import names

__all__ = [
    "CA_COMMON_NAME",
    "NOT_AFTER",
    "NOT_BEFORE",
    "SERVER_COMMON_NAME",
    "TlsMaterial",
    "mint",
    "server_name",
]

CA_COMMON_NAME = "OpenShell sandbox session CA"
SERVER_COMMON_NAME = "OpenShell sandbox runtime"
NOT_BEFORE = datetime.datetime(1975, 1, 1, tzinfo=datetime.UTC)
NOT_AFTER = datetime.datetime(4096, 1, 1, tzinfo=datetime.UTC)  # past 2049: a GeneralizedTime (RFC 5280)


@dataclass(frozen=True, repr=False)
class TlsMaterial:
    """One launch's channel TLS, as PEM text: the authority's certificate (the
    supervisor's only trust anchor), the server certificate (the chain is the leaf
    alone) and the server's PKCS#8 private key (the workload's)."""

    server_name: str
    trust_anchor_pem: str
    certificate_chain_pem: str
    private_key_pem: str

    def __repr__(self) -> str:
        return f"TlsMaterial(server_name={self.server_name!r}, <PEMs redacted>)"


def server_name(session_id: str) -> str:
    """The name the supervisor verifies the runtime's certificate against."""
    return f"sandbox.{session_id}.{names.SERVER_NAME_DOMAIN}"


def mint(session_id: str) -> TlsMaterial:
    """Fresh material for one launch of session ``session_id`` (a validated UUID)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def common_name(value: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, value)])

    def key_usage(*, signature: bool, ca: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=signature, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
            encipher_only=False, decipher_only=False,
        )

    name = server_name(session_id)
    ca_key = ed25519.Ed25519PrivateKey.generate()
    ca_name = common_name(CA_COMMON_NAME)
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOT_BEFORE)
        .not_valid_after(NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(key_usage(signature=False, ca=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, None)  # Ed25519 signs without a separate digest
    )
    key = ed25519.Ed25519PrivateKey.generate()
    leaf = (
        x509.CertificateBuilder()
        .subject_name(common_name(SERVER_COMMON_NAME))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOT_BEFORE)
        .not_valid_after(NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(signature=True, ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, None)
    )
    del ca_key  # the authority signs nothing else: its key leaves with this frame
    pem = serialization.Encoding.PEM
    return TlsMaterial(
        server_name=name,
        trust_anchor_pem=ca.public_bytes(pem).decode("ascii"),
        certificate_chain_pem=leaf.public_bytes(pem).decode("ascii"),
        private_key_pem=key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii"),
    )
