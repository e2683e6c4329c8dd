"""How the agent identity blueprint proves who it is on hop 1: a secret, a certificate or a federated token.

Each credential contributes the form fields that authenticate the blueprint app at the token
endpoint. None of them ever appears in a log line, an error message or a repr.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import uuid
from pathlib import Path
from typing import Protocol

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import SecretStr

from service.graph.errors import TokenAcquisitionError

JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


class BlueprintCredential(Protocol):
    async def assertion_fields(
        self, *, client_id: str, token_url: str, now: float
    ) -> dict[str, str]:
        """The form fields that authenticate ``client_id`` at ``token_url``, built for one request."""

    def describe(self) -> str:
        """What kind of credential this is, for start-up logs (never the credential itself)."""


class BlueprintSecret:
    """A client secret: for development only (Entra recommends certificates or federation)."""

    def __init__(self, secret: str | SecretStr) -> None:
        self._secret = secret if isinstance(secret, SecretStr) else SecretStr(secret)
        if not self._secret.get_secret_value():
            raise ValueError("the blueprint client secret is empty")

    def __repr__(self) -> str:
        return "BlueprintSecret(**********)"

    async def assertion_fields(
        self, *, client_id: str, token_url: str, now: float
    ) -> dict[str, str]:
        return {"client_secret": self._secret.get_secret_value()}

    def describe(self) -> str:
        return "client secret"


class BlueprintCertificate:
    """A certificate whose private key signs a short-lived RS256 client assertion for every request.

    ``certificate`` and ``private_key`` are PEM bytes or paths to PEM files; when ``private_key`` is
    omitted it is read from the certificate's PEM (Key Vault exports hold both). The files are read
    once, here, so a bad file fails at start-up rather than on the first token request.
    """

    assertion_lifetime_s = 600

    def __init__(
        self,
        certificate: bytes | str | Path,
        private_key: bytes | str | Path | None = None,
        *,
        password: bytes | None = None,
    ) -> None:
        cert_pem = _read_pem(certificate)
        certs = x509.load_pem_x509_certificates(cert_pem)  # the leaf comes first in a chain
        key_pem = cert_pem if private_key is None else _read_pem(private_key)
        try:
            key = serialization.load_pem_private_key(key_pem, password=password)
        except (ValueError, TypeError) as exc:
            where = "the certificate PEM" if private_key is None else "the private key PEM"
            raise ValueError(f"no usable private key in {where}: {exc}") from None
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError(
                "the blueprint certificate's key must be RSA (Entra accepts RS256 client assertions)"
            )
        cert_key = certs[0].public_key()
        if (
            not isinstance(cert_key, rsa.RSAPublicKey)
            or key.public_key().public_numbers() != cert_key.public_numbers()
        ):
            raise ValueError("the private key does not belong to the blueprint certificate")
        self._key = key
        der = certs[0].public_bytes(serialization.Encoding.DER)
        self.thumbprint_s256 = (
            base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()
        )

    def __repr__(self) -> str:
        return f"BlueprintCertificate(x5t#S256={self.thumbprint_s256})"

    async def assertion_fields(
        self, *, client_id: str, token_url: str, now: float
    ) -> dict[str, str]:
        issued = int(now)
        claims = {
            "aud": token_url,
            "iss": client_id,
            "sub": client_id,
            "jti": str(uuid.uuid4()),  # fresh per request: Entra refuses a replayed assertion
            "iat": issued,
            "nbf": issued,
            "exp": issued + self.assertion_lifetime_s,
        }
        assertion = jwt.encode(
            claims, self._key, algorithm="RS256", headers={"x5t#S256": self.thumbprint_s256}
        )
        return {"client_assertion_type": JWT_BEARER, "client_assertion": assertion}

    def describe(self) -> str:
        return f"certificate (x5t#S256 {self.thumbprint_s256})"


class BlueprintFederatedTokenFile:
    """A workload-identity token file (AKS projects one and points AZURE_FEDERATED_TOKEN_FILE at it).

    The kubelet rotates the file, so it is read again for every hop-1 request, never cached.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"BlueprintFederatedTokenFile({str(self.path)!r})"

    async def assertion_fields(
        self, *, client_id: str, token_url: str, now: float
    ) -> dict[str, str]:
        try:
            assertion = (await asyncio.to_thread(self.path.read_text, encoding="utf-8")).strip()
        except OSError as exc:
            raise TokenAcquisitionError(
                1,
                f"cannot read the federated token file {self.path} ({exc.strerror or type(exc).__name__})",
                advice="In AKS check the pod's azure.workload.identity/use label and service account; "
                "elsewhere point ENTRABOT_BLUEPRINT_FEDERATED_TOKEN_FILE at a readable token file",
            ) from None
        if not assertion:
            raise TokenAcquisitionError(
                1,
                f"the federated token file {self.path} is empty",
                advice="The workload-identity webhook writes it; check that the projected volume is mounted",
            )
        return {"client_assertion_type": JWT_BEARER, "client_assertion": assertion}

    def describe(self) -> str:
        return f"federated token file {self.path}"


def _read_pem(source: bytes | str | Path) -> bytes:
    return source if isinstance(source, bytes) else Path(source).read_bytes()
