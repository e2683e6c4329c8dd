"""Fixtures for the Graph tests: a self-signed blueprint certificate."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class CertificateFiles:
    certificate: x509.Certificate
    cert_pem: bytes
    key_pem: bytes
    combined_path: Path  # certificate and key in one PEM
    cert_path: Path
    key_path: Path


def make_certificate(tmp_path: Path, name: str = "blueprint") -> CertificateFiles:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    files = CertificateFiles(
        cert,
        cert_pem,
        key_pem,
        tmp_path / f"{name}.pem",
        tmp_path / f"{name}.crt",
        tmp_path / f"{name}.key",
    )
    files.combined_path.write_bytes(cert_pem + key_pem)
    files.cert_path.write_bytes(cert_pem)
    files.key_path.write_bytes(key_pem)
    return files


@pytest.fixture
def certificate(tmp_path: Path) -> CertificateFiles:
    return make_certificate(tmp_path)
