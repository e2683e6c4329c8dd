"""Bearer authentication for /mcp: static tokens for local runs, Entra-issued JWTs in a tenant.

A request without a valid token gets 401 with ``WWW-Authenticate`` pointing at this service's
OAuth protected-resource metadata (RFC 9728), which names the Entra tenant as the authorization
server. A valid Entra token without a required app role or scope (``access_policy``) gets 403 with
``error="insufficient_scope"`` (RFC 6750 §3.1). With no auth configured, /mcp is open only while the
service binds a loopback address.

A host's token is checked and dropped here: the ``Authorization`` header is removed before the
request reaches the SDK, and the principal handed on carries a placeholder instead of the token,
so nothing a tool can reach holds it (Graph is called with the agent user's own tokens).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import httpx
import jwt
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from pydantic import BaseModel
from starlette.authentication import AuthCredentials
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from service.config import Settings
from service.mcp.access_policy import AccessPolicy, token_client_id, token_roles, token_scopes
from service.mcp.jwks import JwksCache

log = logging.getLogger(__name__)

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
JWT_ALGORITHMS = ["RS256"]
DEFAULT_LEEWAY_S = 60
_AUTHORIZATION = b"authorization"
VERIFIED_TOKEN_PLACEHOLDER = "[verified-and-dropped]"


class AuthConfigError(RuntimeError):
    """The auth settings are incomplete or unsafe; the message says what to set."""


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

    @classmethod
    def invalid(cls) -> Verification:
        return cls(Verdict.INVALID)


class TokenVerifier(Protocol):
    async def verify(self, token: str) -> Verification:
        """Whether ``token`` is valid here and grants access, and the principal behind it."""


# --- configuration ---


def static_tokens(settings: Settings) -> list[str]:
    if settings.mcp_static_tokens is None:
        return []
    return [
        t.strip() for t in settings.mcp_static_tokens.get_secret_value().split(",") if t.strip()
    ]


def jwt_audiences(settings: Settings) -> list[str]:
    return [a.strip() for a in (settings.mcp_jwt_audience or "").split(",") if a.strip()]


def entra_issuer(settings: Settings) -> str:
    return f"{settings.authority.rstrip('/')}/{settings.tenant_id}/v2.0"


def entra_jwks_url(settings: Settings) -> str:
    return f"{settings.authority.rstrip('/')}/{settings.tenant_id}/discovery/v2.0/keys"


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def access_policy(settings: Settings) -> AccessPolicy:
    return AccessPolicy.from_settings(
        settings.mcp_jwt_required_roles,
        settings.mcp_jwt_required_scopes,
        settings.mcp_jwt_allowed_client_ids,
    )


def check_auth_config(settings: Settings) -> None:
    """Refuse to start with auth settings that are half set, or with an open /mcp off loopback."""
    policy = access_policy(settings)
    if jwt_audiences(settings) and not settings.tenant_id:
        raise AuthConfigError(
            "ENTRABOT_MCP_JWT_AUDIENCE is set but ENTRABOT_TENANT_ID is not; set the tenant whose "
            "tokens /mcp accepts, or unset ENTRABOT_MCP_JWT_AUDIENCE"
        )
    if jwt_audiences(settings) and not policy.grants_anything:
        # Without it any app in the tenant could get a token for this audience and read the agent's mail.
        raise AuthConfigError(
            "ENTRABOT_MCP_JWT_AUDIENCE is set but neither ENTRABOT_MCP_JWT_REQUIRED_ROLES nor "
            "ENTRABOT_MCP_JWT_REQUIRED_SCOPES is; set the app role (or delegated scope) a client must hold "
            "(docs/entra-app-registration.md)"
        )
    if (policy.grants_anything or policy.client_ids) and not jwt_audiences(settings):
        raise AuthConfigError(
            "ENTRABOT_MCP_JWT_REQUIRED_ROLES, _REQUIRED_SCOPES or _ALLOWED_CLIENT_IDS is set but "
            "ENTRABOT_MCP_JWT_AUDIENCE is not; set the audience of the tokens /mcp accepts, or unset them"
        )
    if settings.mcp_static_tokens is not None and not static_tokens(settings):
        raise AuthConfigError(
            "ENTRABOT_MCP_STATIC_TOKENS is set but holds no token; give one or more comma-separated "
            "tokens, or unset it"
        )
    if not auth_configured(settings) and not is_loopback(settings.host):
        raise AuthConfigError(
            f"ENTRABOT_HOST is {settings.host!r}, which is not a loopback address, and /mcp has no "
            "authentication; set ENTRABOT_MCP_JWT_AUDIENCE (with ENTRABOT_TENANT_ID) or "
            "ENTRABOT_MCP_STATIC_TOKENS, or bind ENTRABOT_HOST=127.0.0.1"
        )


def auth_configured(settings: Settings) -> bool:
    return bool(static_tokens(settings) or jwt_audiences(settings))


def build_verifier(settings: Settings, http: httpx.AsyncClient | None) -> TokenVerifier | None:
    """The verifier for the configured auth; None means anonymous access (loopback dev only).

    ``http`` fetches the tenant's signing keys; it is needed only when JWTs are accepted.
    """
    check_auth_config(settings)
    verifiers: list[TokenVerifier] = []
    if tokens := static_tokens(settings):
        verifiers.append(StaticTokenVerifier(tokens))
    if audiences := jwt_audiences(settings):
        if http is None:
            raise ValueError(
                "accepting Entra tokens needs an HTTP client to fetch the tenant's signing keys"
            )
        verifiers.append(
            EntraJwtVerifier(
                jwks=JwksCache(entra_jwks_url(settings), http),
                issuer=entra_issuer(settings),
                audiences=audiences,
                policy=access_policy(settings),
            )
        )
    if not verifiers:
        return None
    return verifiers[0] if len(verifiers) == 1 else AnyOfVerifier(verifiers)


# --- verifiers ---


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
            return Verification.invalid()
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
            return Verification.invalid()
        kid = header.get("kid")
        if header.get("alg") not in JWT_ALGORITHMS or not isinstance(kid, str):
            return Verification.invalid()
        key = await self._jwks.key(kid)
        if key is None:
            log.info("bearer token rejected", extra={"reason": "unknown_signing_key"})
            return Verification.invalid()
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
            log.info("bearer token rejected", extra={"reason": type(exc).__name__})
            return Verification.invalid()
        principal = Principal(
            client_id=token_client_id(claims) or "unknown-client",
            subject=str(claims.get("oid") or claims.get("sub") or "") or None,
            issuer=self._issuer,
            scopes=token_scopes(claims) + token_roles(claims),
            expires_at=int(claims["exp"]),
        )
        if not self._policy.allows(claims):
            log.info(
                "bearer token refused",
                extra={"reason": "insufficient_scope", "client_id": principal.client_id},
            )
            return Verification(Verdict.INSUFFICIENT, principal)
        return Verification(Verdict.ACCEPTED, principal)


class AnyOfVerifier:
    def __init__(self, verifiers: Sequence[TokenVerifier]) -> None:
        self._verifiers = list(verifiers)

    async def verify(self, token: str) -> Verification:
        """The first acceptance; else a refusal for lack of permission over one for invalidity."""
        best = Verification.invalid()
        for verifier in self._verifiers:
            verification = await verifier.verify(token)
            if verification.verdict is Verdict.ACCEPTED:
                return verification
            if verification.verdict is Verdict.INSUFFICIENT:
                best = verification
        return best


# --- the middleware and the metadata document ---


class BearerAuth:
    """ASGI middleware in front of /mcp. ``verifier=None`` lets every request in (loopback dev)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        verifier: TokenVerifier | None,
        public_base_url: str | None = None,
        required_scope: str = "",
    ) -> None:
        self.app = app
        self._verifier = verifier
        self._public_base_url = public_base_url
        self._required_scope = required_scope  # named in a 403's challenge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _bearer_token(scope)
        headers = [(k, v) for k, v in scope["headers"] if k != _AUTHORIZATION]
        if self._verifier is None:
            await self.app({**scope, "headers": headers}, receive, send)
            return
        verification = await self._verifier.verify(token) if token else None
        if verification is None or verification.principal is None:
            await self._refuse(scope, receive, send, token_given=token is not None)
            return
        if verification.verdict is not Verdict.ACCEPTED:
            await self._forbid(scope, receive, send)
            return
        principal = verification.principal
        user = AuthenticatedUser(_access_token(principal))
        # scope["user"] is how the SDK binds a session to the principal that opened it.
        downstream = {
            **scope,
            "headers": headers,
            "user": user,
            "auth": AuthCredentials(list(principal.scopes)),
        }
        await self.app(downstream, receive, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, *, token_given: bool
    ) -> None:
        metadata = f"{public_base_url(scope, self._public_base_url)}{METADATA_PATH}"
        challenge = f'Bearer resource_metadata="{metadata}"'
        body = {"error": "unauthorized", "error_description": "a bearer token is required"}
        if token_given:
            challenge += (
                ', error="invalid_token", error_description="the bearer token is not valid here"'
            )
            body = {
                "error": "invalid_token",
                "error_description": "the bearer token is not valid here",
            }
        response = Response(json.dumps(body), status_code=401, media_type="application/json")
        response.headers["WWW-Authenticate"] = challenge
        await response(scope, receive, send)

    async def _forbid(self, scope: Scope, receive: Receive, send: Send) -> None:
        metadata = f"{public_base_url(scope, self._public_base_url)}{METADATA_PATH}"
        description = "the token carries none of the app roles or scopes this service requires"
        challenge = (
            f'Bearer resource_metadata="{metadata}", error="insufficient_scope", '
            f'error_description="{description}"'
        )
        if self._required_scope:
            challenge += f', scope="{self._required_scope}"'
        body = {"error": "insufficient_scope", "error_description": description}
        response = Response(json.dumps(body), status_code=403, media_type="application/json")
        response.headers["WWW-Authenticate"] = challenge
        await response(scope, receive, send)


class ProtectedResourceDocument(BaseModel):
    """OAuth 2.0 protected resource metadata (RFC 9728) for /mcp."""

    resource: str
    authorization_servers: list[str] | None = None
    bearer_methods_supported: list[str] = ["header"]
    scopes_supported: list[str] | None = None
    resource_name: str = "Entrabot Fleet MCP"


def protected_resource_routes(settings: Settings) -> list[Route]:
    """The metadata at the root well-known path and at the path-suffixed one RFC 9728 §3.1 names."""
    audiences = jwt_audiences(settings)
    scopes = access_policy(settings).scopes

    async def metadata(request: Request) -> Response:
        document = ProtectedResourceDocument(
            resource=f"{public_base_url(request.scope, settings.mcp_public_base_url)}{MCP_PATH}",
            authorization_servers=[entra_issuer(settings)] if audiences else None,
            # Client credentials ask for ".default" (the app roles assigned); a signed-in user's client
            # asks for the delegated scopes by their full name.
            scopes_supported=[f"{audiences[0]}/{name}" for name in (".default", *sorted(scopes))]
            if audiences
            else None,
        )
        return JSONResponse(
            document.model_dump(exclude_none=True),
            headers={"Cache-Control": "public, max-age=3600"},
        )

    return [
        Route(METADATA_PATH, metadata, methods=["GET"]),
        Route(f"{METADATA_PATH}{MCP_PATH}", metadata, methods=["GET"]),
    ]


def public_base_url(scope: Scope, configured: str | None) -> str:
    if configured:
        return configured.rstrip("/")
    return str(Request(scope).base_url).rstrip("/")


def _bearer_token(scope: Scope) -> str | None:
    raw: bytes | None = next((v for k, v in scope["headers"] if k == _AUTHORIZATION), None)
    if raw is None:
        return None
    scheme, _, value = raw.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def _access_token(principal: Principal) -> AccessToken:
    return AccessToken(
        token=VERIFIED_TOKEN_PLACEHOLDER,  # the SDK's model wants one; nothing downstream may hold the token
        client_id=principal.client_id,
        scopes=list(principal.scopes),
        expires_at=principal.expires_at,
        subject=principal.subject,
        claims={"iss": principal.issuer} if principal.issuer else None,
    )
