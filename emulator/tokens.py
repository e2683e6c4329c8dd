"""The tenant's token signer: RS256 JWTs published in a JWKS, and the registry that lets the admin
API revoke tokens already issued (Graph then answers them with 401, as continuous access evaluation does).
"""

from __future__ import annotations

import base64
import hashlib
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator.clock import Clock


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_b64url(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class InvalidToken(Exception):
    """The token is not one this tenant signed, or is not a JWT at all."""


@dataclass(frozen=True)
class IssuedToken:
    jti: str
    app_id: str
    user_id: str | None
    expires: int  # epoch seconds


def _key_id(key: rsa.RSAPrivateKey) -> str:
    public_der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return b64url(hashlib.sha1(public_der).digest())  # noqa: S324 - a key id, as Entra's x5t is


class TokenService:
    def __init__(self, clock: Clock, lifetime_s: int, key: rsa.RSAPrivateKey | None = None) -> None:
        self._clock = clock
        self.lifetime_s = lifetime_s
        self._key = key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = _key_id(self._key)
        self._retired: rsa.RSAPrivateKey | None = (
            None  # still published after a rotation that keeps it
        )
        self._issued: dict[str, IssuedToken] = {}
        self._revoked: set[str] = set()
        self._lock = threading.Lock()

    # --- publishing ---

    def jwks(self) -> dict[str, Any]:
        return {"keys": [_jwk(key) for key in self._published()]}

    def _published(self) -> list[rsa.RSAPrivateKey]:
        return [self._key] if self._retired is None else [self._key, self._retired]

    def rotate_key(self, *, keep_previous: bool = False) -> str:
        """Sign with a new key from now on. Entra publishes the next key before it signs with it and
        drops the old one later; ``keep_previous`` keeps the old key published (tokens it signed stay
        valid), otherwise it is removed at once, as when a key is withdrawn. Returns the new key id."""
        with self._lock:
            self._retired = self._key if keep_previous else None
            self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.kid = _key_id(self._key)
            return self.kid

    # --- issuing ---

    def mint(
        self, claims: dict[str, Any], *, app_id: str, user_id: str | None = None
    ) -> tuple[str, int]:
        """Sign ``claims`` plus iat/nbf/exp/jti; returns the token and its lifetime in seconds."""
        now = int(self._clock.now().timestamp())
        jti = b64url(uuid.uuid4().bytes)
        body = {
            **claims,
            "iat": now,
            "nbf": now,
            "exp": now + self.lifetime_s,
            "jti": jti,
            "uti": jti,
        }
        with self._lock:
            key, kid = self._key, self.kid
        token = jwt.encode(body, key, algorithm="RS256", headers={"kid": kid, "x5t": kid})
        with self._lock:
            self._prune(now)
            self._issued[jti] = IssuedToken(jti, app_id, user_id, now + self.lifetime_s)
        return token, self.lifetime_s

    def _prune(self, now: int) -> None:
        if len(self._issued) < 10_000:
            return
        for jti in [j for j, t in self._issued.items() if t.expires < now]:
            del self._issued[jti]
            self._revoked.discard(jti)

    # --- validating ---

    def decode(self, token: str) -> dict[str, Any]:
        """The claims of a token this tenant signed. Lifetime and audience are the caller's to check,
        against the tenant clock and with the error each endpoint gives."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"not a well-formed JWT ({exc})") from None
        key = next((k for k in self._published() if _key_id(k) == header.get("kid")), None)
        if key is None:
            raise InvalidToken("signed with a key this tenant does not publish")
        try:
            return jwt.decode(
                token,
                key.public_key(),
                algorithms=["RS256"],
                options={
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_aud": False,
                    "verify_iss": False,
                },
            )
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"signature validation failed ({exc})") from None

    def is_expired(self, claims: dict[str, Any], now: datetime | None = None) -> bool:
        at = (now or self._clock.now()).timestamp()
        return float(claims.get("exp", 0)) <= at

    def is_revoked(self, claims: dict[str, Any]) -> bool:
        with self._lock:
            return claims.get("jti") in self._revoked

    # --- revoking ---

    def revoke(
        self, *, everything: bool = False, user_id: str | None = None, app_id: str | None = None
    ) -> int:
        """Revoke every live token matching the selector; returns how many."""
        with self._lock:
            hits = [
                t.jti
                for t in self._issued.values()
                if everything
                or (user_id is not None and t.user_id == user_id)
                or (app_id is not None and t.app_id == app_id)
            ]
            new = [j for j in hits if j not in self._revoked]
            self._revoked.update(new)
            return len(new)


def _jwk(key: rsa.RSAPrivateKey) -> dict[str, Any]:
    numbers = key.public_key().public_numbers()
    kid = _key_id(key)
    return {
        "kty": "RSA",
        "use": "sig",
        "alg": "RS256",
        "kid": kid,
        "x5t": kid,
        "n": _int_b64url(numbers.n),
        "e": _int_b64url(numbers.e),
    }
