"""Bearer authentication in front of /mcp, and the resource metadata its challenges point at.

A request without a valid token gets 401 with ``WWW-Authenticate`` pointing at this service's
OAuth protected-resource metadata (RFC 9728), which names the Entra tenant as the authorization
server. A valid Entra token without a required app role or scope (``access_policy``) gets 403 with
``error="insufficient_scope"`` (RFC 6750 §3.1). With no auth configured, /mcp is open only while the
service binds a loopback address (``service.from_settings.mcp`` refuses anything else).

A host's token is checked and dropped here: the ``Authorization`` header is removed before the
request reaches the SDK, and the principal handed on carries a placeholder instead of the token,
so nothing a tool can reach holds it (Graph is called with the agent user's own tokens).

Not the SDK's ``BearerAuthBackend`` with ``RequireAuthMiddleware``: the backend leaves the
``Authorization`` header on the request and the token in the ``AccessToken`` it hands on, and the
middleware requires every scope of a list where /mcp requires any one role or scope (and an allowed
client), so it cannot tell a 403 from a 401 the way ``verifiers.Verdict`` does. The SDK's
``AuthenticatedUser`` and ``AccessToken`` are what this hands on, since the SDK binds a session to them.
"""

from __future__ import annotations

import json
import logging

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from pydantic import BaseModel
from starlette.authentication import AuthCredentials
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from service.mcp.options import McpAuthOptions
from service.mcp.verifiers import Principal, TokenVerifier, Verdict

log = logging.getLogger(__name__)

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
_AUTHORIZATION = b"authorization"
VERIFIED_TOKEN_PLACEHOLDER = "[verified-and-dropped]"


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
            reason = verification.reason if verification else "no bearer token"
            _log_refusal(scope, 401, reason)
            await self._refuse(scope, receive, send, token_given=token is not None)
            return
        if verification.verdict is not Verdict.ACCEPTED:
            _log_refusal(scope, 403, verification.reason, verification.principal.client_id)
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
    """OAuth 2.0 protected resource metadata (RFC 9728) for /mcp.

    Not the SDK's ``ProtectedResourceMetadata`` (nor its ``create_protected_resource_routes``): that
    model requires at least one authorization server, where static tokens have none, and the routes
    serve one fixed resource URL, where this one follows each request's base URL unless configured.
    """

    resource: str
    authorization_servers: list[str] | None = None
    bearer_methods_supported: list[str] = ["header"]
    scopes_supported: list[str] | None = None
    resource_name: str = "Entrabot Fleet MCP"


def protected_resource_routes(auth: McpAuthOptions) -> list[Route]:
    """The metadata at the root well-known path and at the path-suffixed one RFC 9728 §3.1 names."""
    audiences = auth.jwt_audiences
    scopes = auth.policy.scopes

    async def metadata(request: Request) -> Response:
        document = ProtectedResourceDocument(
            resource=f"{public_base_url(request.scope, auth.public_base_url)}{MCP_PATH}",
            authorization_servers=[auth.issuer] if audiences else None,
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


def _log_refusal(scope: Scope, status: int, reason: str, client_id: str | None = None) -> None:
    """One line per refused request, so an operator can tell a host with a stale token from one with
    too few roles; the reason is the verifier's words, never the token or a claim of an invalid one."""
    peer = scope.get("client")
    extra = {"status": status, "reason": reason, "peer": peer[0] if peer else None}
    if client_id is not None:  # a verified token's client: the app to grant a role to
        extra["client_id"] = client_id
    log.info("bearer token refused", extra=extra)


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
