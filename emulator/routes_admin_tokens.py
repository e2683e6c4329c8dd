"""Admin controls over the tenant's tokens for a protected API (like the fleet's own /mcp).

Entra issues such tokens to client apps for an API's app ID URI, carrying the app roles assigned to
the client (``roles``) or, for a signed-in user, the delegated scopes granted (``scp``). The emulator
models no app registrations for third-party APIs, so a test asks for exactly the token Entra would
issue after a given assignment or consent. Key rotation withdraws the signing key the way Entra's
key rollover does, so a resource's key cache can be tested against it.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from emulator.context import context_of

router = APIRouter(prefix="/_emulator")


class ApiTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    audience: str  # the API's app ID URI or client id (the token's aud)
    client_id: str = Field(
        default_factory=lambda: str(uuid.uuid4())
    )  # the calling app (azp / appid)
    roles: list[str] = []  # app roles assigned to the client (app-only) or the user (delegated)
    scp: str | None = None  # delegated scopes, space-separated: makes it a user token
    user_id: str | None = (
        None  # the signed-in user for a delegated token (default: the first human)
    )

    @model_validator(mode="after")
    def _user_only_when_delegated(self) -> ApiTokenRequest:
        if self.user_id is not None and self.scp is None:
            raise ValueError("user_id makes sense only for a delegated token: give scp as well")
        return self


class RotateKeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keep_previous: bool = False


@router.post("/tokens/api")
async def mint_api_token(body: ApiTokenRequest, request: Request) -> dict[str, Any]:
    ctx = context_of(request)
    seed = ctx.seed
    # A v2.0 access token (the API's manifest sets requestedAccessTokenVersion 2): the client is in
    # azp (Microsoft identity platform, access token claims reference).
    claims: dict[str, Any] = {
        "aud": body.audience,
        "iss": f"{ctx.base(request)}/{seed.tenant_id}/v2.0",
        "tid": seed.tenant_id,
        "ver": "2.0",
        "azp": body.client_id,
    }
    if body.roles:
        claims["roles"] = body.roles
    user_id: str | None = None
    if body.scp is not None:
        user_id = body.user_id or next(u.id for u in seed.users if not u.is_agent_user)
        claims.update({"scp": body.scp, "oid": user_id, "sub": user_id, "idtyp": "user"})
    else:
        claims.update({"oid": body.client_id, "sub": body.client_id, "idtyp": "app"})
    token, lifetime = ctx.tokens.mint(claims, app_id=body.client_id, user_id=user_id)
    return {
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": lifetime,
        "client_id": body.client_id,
    }


@router.post("/keys/rotate")
async def rotate_signing_key(body: RotateKeyRequest, request: Request) -> dict[str, Any]:
    ctx = context_of(request)
    kid = ctx.tokens.rotate_key(keep_previous=body.keep_previous)
    return {"kid": kid, "published": [key["kid"] for key in ctx.tokens.jwks()["keys"]]}
