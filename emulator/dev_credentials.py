"""Credentials a blueprint holds in tests and local demos, made on the spot: a self-signed certificate
(for certificate client assertions) and a workload-identity issuer (for federated tokens like the one
AKS projects into a pod). Their public parts are registered on a seed with ``with_blueprint_credentials``.

Nothing private is ever shipped: each run makes fresh keys.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from emulator.grants import certificate_thumbprints
from emulator.seed import TOKEN_EXCHANGE_AUDIENCE, FederatedCredential, FederationIssuer, Seed

DEFAULT_SUBJECT = "system:serviceaccount:entrabot:entrabot"


@dataclass(frozen=True)
class DevCertificate:
    cert_pem: str
    key_pem: str

    @property
    def x5t_s256(self) -> str:
        return certificate_thumbprints(self.cert_pem)[0]

    @property
    def pem_bundle(self) -> str:
        """Key and certificate in one PEM file, as ENTRABOT_BLUEPRINT_CERTIFICATE_PATH expects."""
        return self.key_pem + self.cert_pem

    def assertion(
        self,
        *,
        client_id: str,
        token_endpoint: str,
        lifetime_s: int = 600,
        now: dt.datetime | None = None,
        audience: str | None = None,
    ) -> str:
        """A client assertion as MSAL builds it: RS256, x5t#S256 header, aud = the token endpoint."""
        issued = int((now or dt.datetime.now(dt.timezone.utc)).timestamp())
        claims = {
            "aud": audience or token_endpoint,
            "iss": client_id,
            "sub": client_id,
            "jti": str(uuid.uuid4()),
            "iat": issued,
            "nbf": issued,
            "exp": issued + lifetime_s,
        }
        return jwt.encode(
            claims, self.key_pem, algorithm="RS256", headers={"x5t#S256": self.x5t_s256}
        )


def make_certificate(common_name: str = "entrabot-blueprint") -> DevCertificate:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .sign(key, hashes.SHA256())
    )
    return DevCertificate(
        cert.public_bytes(serialization.Encoding.PEM).decode(),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    )


@dataclass(frozen=True)
class DevIssuer:
    """A workload-identity token issuer (an OIDC issuer URL and its signing key)."""

    issuer: str
    key_pem: str
    kid: str

    @property
    def jwks(self) -> dict[str, Any]:
        public = serialization.load_pem_private_key(self.key_pem.encode(), None).public_key()
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(public))  # type: ignore[arg-type]
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def token(
        self,
        subject: str = DEFAULT_SUBJECT,
        *,
        audience: str = TOKEN_EXCHANGE_AUDIENCE,
        lifetime_s: int = 3600,
        now: dt.datetime | None = None,
    ) -> str:
        issued = int((now or dt.datetime.now(dt.timezone.utc)).timestamp())
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": [audience],
            "iat": issued,
            "nbf": issued,
            "exp": issued + lifetime_s,
            "jti": str(uuid.uuid4()),
        }
        return jwt.encode(claims, self.key_pem, algorithm="RS256", headers={"kid": self.kid})


def make_issuer(issuer: str = "https://oidc.aks.local/entrabot") -> DevIssuer:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return DevIssuer(issuer, pem, uuid.uuid4().hex)


def with_blueprint_credentials(
    seed: Seed,
    *,
    certificate: DevCertificate | None = None,
    issuer: DevIssuer | None = None,
    subject: str = DEFAULT_SUBJECT,
) -> Seed:
    """A copy of ``seed`` whose blueprint also trusts ``certificate`` and/or ``issuer`` tokens for ``subject``."""
    blueprint = seed.blueprint
    certificates = blueprint.certificates + ((certificate.cert_pem,) if certificate else ())
    credentials = blueprint.federated_credentials
    issuers = seed.federation_issuers
    if issuer is not None:
        credentials += (
            FederatedCredential(
                name=f"fic-{len(credentials)}", issuer=issuer.issuer, subject=subject
            ),
        )
        issuers = tuple(i for i in issuers if i.issuer != issuer.issuer) + (
            FederationIssuer(issuer=issuer.issuer, jwks=issuer.jwks),
        )
    updated = blueprint.model_copy(
        update={"certificates": certificates, "federated_credentials": credentials}
    )
    apps = tuple(updated if a.app_id == blueprint.app_id else a for a in seed.apps)
    # Re-validate so the new references are checked like a loaded seed's.
    return Seed.model_validate(
        {
            **seed.model_dump(),
            "apps": [a.model_dump() for a in apps],
            "federation_issuers": [i.model_dump() for i in issuers],
        }
    )
