"""Which bearer tokens /mcp accepts: static tokens for local runs, Entra-issued JWTs in a tenant.

Not the SDK's ``mcp.server.auth.provider.TokenVerifier``: its ``verify_token`` answers an
``AccessToken`` or None, valid or not, where /mcp needs a third answer, a valid Entra token without a
required app role or scope, which gets 403 ``insufficient_scope`` instead of 401 (``access_policy``),
with the principal still known for the log. The principal never carries the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import httpx
import jwt

from service.mcp.access_policy import AccessPolicy, token_client_id, token_roles, token_scopes
from service.mcp.jwks import JwksCache
from service.mcp.options import McpAuthOptions

log = logging.getLogger(__name__)

JWT_ALGORITHMS = ["RS256"]
DEFAULT_LEEWAY_S = 60


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a verified token speaks for. Never the token itself."""

    client_id: str
    subject: str | None = None
    issuer: str | None = None
    scopes: tuple[str, ...] = ()
    expires_at: int | None = None


class Verdict(str, Enum):
    ACCEPTED = "accepted"
    INVALID = "invalid"  # not a token this service trusts: 401 invalid_token
    INSUFFICIENT = (
        "insufficient"  # a valid token without a required role or scope: 403 insufficient_scope
    )


@dataclass(frozen=True, slots=True)
class Verification:
    verdict: Verdict
    principal: Principal | None = None  # set unless INVALID
    # Why a token was refused, in words safe to log: never the token nor any claim of an invalid one.
    reason: str = ""

    @classmethod
    def invalid(cls, reason: str) -> Verification:
        return cls(Verdict.INVALID, reason=reason)


class TokenVerifier(Protocol):
    async def verify(self, token: str) -> Verification:
        """Whether ``token`` is valid here and grants access, and the principal behind it."""


def build_verifier(auth: McpAuthOptions, http: httpx.AsyncClient | None) -> TokenVerifier | None:
    """The verifier for the configured auth; None means anonymous access (loopback dev only).

    ``http`` fetches the tenant's signing keys; it is needed only when JWTs are accepted.
    """
    verifiers: list[TokenVerifier] = []
    if auth.static_tokens:
        verifiers.append(StaticTokenVerifier(auth.static_tokens))
    if auth.jwt_audiences:
        if http is None:
            raise ValueError(
                "accepting Entra tokens needs an HTTP client to fetch the tenant's signing keys"
            )
        verifiers.append(
            EntraJwtVerifier(
                jwks=JwksCache(auth.jwks_url, http),
                issuer=auth.issuer,
                audiences=auth.jwt_audiences,
                policy=auth.policy,
            )
        )
    if not verifiers:
        return None
    return verifiers[0] if len(verifiers) == 1 else AnyOfVerifier(verifiers)


class StaticTokenVerifier:
    """Tokens from the settings. Digests are compared, all of them every time, in constant time."""

    def __init__(self, tokens: Sequence[str]) -> None:
        if not tokens:
            raise ValueError("at least one static token is needed")
        self._digests = [hashlib.sha256(t.encode()).digest() for t in tokens]

    async def verify(self, token: str) -> Verification:
        offered = hashlib.sha256(token.encode()).digest()
        matched: int | None = None
        for index, digest in enumerate(self._digests):
            if hmac.compare_digest(digest, offered):
                matched = index
        if matched is None:
            return Verification.invalid("matches no static token")
        # The principal names the token's position, never its value.
        return Verification(Verdict.ACCEPTED, Principal(client_id=f"static-token-{matched}"))


class EntraJwtVerifier:
    """RS256 access tokens issued by the tenant for this service's audience, holding a required role
    or scope of ``policy``."""

    def __init__(
        self,
        *,
        jwks: JwksCache,
        issuer: str,
        audiences: Sequence[str],
        policy: AccessPolicy,
        leeway_s: int = DEFAULT_LEEWAY_S,
    ) -> None:
        if not policy.grants_anything:
            raise ValueError("an Entra token verifier needs a required role or scope")
        self._jwks = jwks
        self._issuer = issuer
        self._audiences = list(audiences)
        self._policy = policy
        self._leeway_s = leeway_s

    async def verify(self, token: str) -> Verification:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return Verification.invalid("not a JWT")
        kid = header.get("kid")
        if header.get("alg") not in JWT_ALGORITHMS or not isinstance(kid, str):
            return Verification.invalid("a JWT without a key id or not RS256")
        key = await self._jwks.key(kid)
        if key is None:
            return Verification.invalid("a JWT signed by a key the tenant does not publish")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=JWT_ALGORITHMS,
                audience=self._audiences,
                issuer=self._issuer,
                leeway=self._leeway_s,
                options={"require": ["exp", "aud", "iss"]},
            )
        except jwt.PyJWTError as exc:
            # The library's class names the failed check (ExpiredSignatureError, InvalidAudienceError).
            return Verification.invalid(f"a JWT that fails {type(exc).__name__}")
        principal = Principal(
            client_id=token_client_id(claims) or "unknown-client",
            subject=str(claims.get("oid") or claims.get("sub") or "") or None,
            issuer=self._issuer,
            scopes=token_scopes(claims) + token_roles(claims),
            expires_at=int(claims["exp"]),
        )
        if not self._policy.allows(claims):
            return Verification(
                Verdict.INSUFFICIENT, principal, reason="none of the required roles or scopes"
            )
        return Verification(Verdict.ACCEPTED, principal)


class AnyOfVerifier:
    def __init__(self, verifiers: Sequence[TokenVerifier]) -> None:
        self._verifiers = list(verifiers)

    async def verify(self, token: str) -> Verification:
        """The first acceptance; else a refusal for lack of permission over one for invalidity."""
        insufficient: Verification | None = None
        reasons: list[str] = []
        for verifier in self._verifiers:
            verification = await verifier.verify(token)
            if verification.verdict is Verdict.ACCEPTED:
                return verification
            if verification.verdict is Verdict.INSUFFICIENT:
                insufficient = verification
            reasons.append(verification.reason)
        return insufficient or Verification.invalid("; ".join(reasons))
