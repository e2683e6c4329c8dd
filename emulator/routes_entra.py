"""Entra's endpoints for the tenant: the v2.0 token and device-code endpoints, signing keys, OIDC metadata."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from emulator.context import context_of
from emulator.errors import EntraError, entra_error_body
from emulator.grants import Endpoint

router = APIRouter()


@router.post("/{tenant_id}/oauth2/v2.0/token")
async def token(tenant_id: str, request: Request) -> JSONResponse:
    ctx = context_of(request)
    return await _answer(request, lambda params, endpoint: ctx.grantor.grant(params, endpoint))


@router.post("/{tenant_id}/oauth2/v2.0/devicecode")
async def device_code(tenant_id: str, request: Request) -> JSONResponse:
    """The device authorization request (see emulator.device_codes)."""
    ctx = context_of(request)

    def start(params: dict[str, str], endpoint: Endpoint) -> dict[str, Any]:
        if tenant_id not in (ctx.seed.tenant_id, ctx.seed.tenant_domain):
            raise EntraError("invalid_request", 90002, f"Tenant '{tenant_id}' not found.")
        return ctx.grantor.sign_in.start_device_authorization(params, endpoint)

    return await _answer(request, start)


async def _answer(
    request: Request, decide: Callable[[dict[str, str], Endpoint], dict[str, Any]]
) -> JSONResponse:
    ctx = context_of(request)
    # Entra reads only a form body; anything else arrives as an empty form and fails on its fields.
    form = await request.form()
    params = {k: v for k, v in form.items() if isinstance(v, str)}
    request.state.app_id = params.get("client_id")
    endpoint = Endpoint(ctx.base(request), request.path_params["tenant_id"])
    try:
        body = decide(params, endpoint)
    except EntraError as err:
        return JSONResponse(
            entra_error_body(
                err,
                now=ctx.clock.now(),
                authority=ctx.base(request),
                correlation_id=request.headers.get("client-request-id"),
            ),
            status_code=err.status,
        )
    return JSONResponse(body, headers={"Cache-Control": "no-store, no-cache", "Pragma": "no-cache"})


@router.get("/{tenant_id}/discovery/v2.0/keys")
async def keys(tenant_id: str, request: Request) -> JSONResponse:
    ctx = context_of(request)
    if tenant_id not in (ctx.seed.tenant_id, ctx.seed.tenant_domain):
        return _tenant_not_found(request, tenant_id)
    return JSONResponse(ctx.tokens.jwks())


@router.get("/{tenant_id}/v2.0/.well-known/openid-configuration")
async def openid_configuration(tenant_id: str, request: Request) -> JSONResponse:
    ctx = context_of(request)
    if tenant_id not in (ctx.seed.tenant_id, ctx.seed.tenant_domain):
        return _tenant_not_found(request, tenant_id)
    base, tid = ctx.base(request), ctx.seed.tenant_id
    document: dict[str, Any] = {
        "token_endpoint": f"{base}/{tid}/oauth2/v2.0/token",
        "device_authorization_endpoint": f"{base}/{tid}/oauth2/v2.0/devicecode",
        "token_endpoint_auth_methods_supported": [
            "client_secret_post",
            "private_key_jwt",
            "client_secret_basic",
        ],
        "jwks_uri": f"{base}/{tid}/discovery/v2.0/keys",
        "response_modes_supported": ["query", "fragment", "form_post"],
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "issuer": f"{base}/{tid}/v2.0",
        "request_uri_parameter_supported": False,
        "authorization_endpoint": f"{base}/{tid}/oauth2/v2.0/authorize",
        "claims_supported": [
            "sub",
            "iss",
            "aud",
            "exp",
            "iat",
            "nbf",
            "name",
            "oid",
            "tid",
            "preferred_username",
            "upn",
            "idtyp",
            "scp",
            "roles",
            "appid",
        ],
        "tenant_region_scope": "NA",
        "cloud_instance_name": "microsoftonline.com",
    }
    return JSONResponse(document)


def _tenant_not_found(request: Request, tenant_id: str) -> JSONResponse:
    ctx = context_of(request)
    err = EntraError(
        "invalid_tenant",
        90002,
        f"Tenant '{tenant_id}' not found. Check to make sure you have the "
        "correct tenant ID and are signing into the correct cloud.",
    )
    return JSONResponse(
        entra_error_body(
            err,
            now=ctx.clock.now(),
            authority=ctx.base(request),
            correlation_id=request.headers.get("client-request-id"),
        ),
        status_code=400,
    )
