"""Bearer auth, resource metadata and DNS-rebinding protection on /mcp, over real HTTP."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from service.devstack.uvicorn_runner import serve_app
from service.from_settings.mcp import AuthConfigError, check_auth_config
from service.mcp.bearer import VERIFIED_TOKEN_PLACEHOLDER, BearerAuth
from service.mcp.jwks import JwksCache
from service.mcp.verifiers import StaticTokenVerifier
from tests.mcp.server_fixture import (
    MCP_HEADERS,
    initialize_body,
    live_mcp,
    mcp_settings,
    session_headers,
)

TENANT = "7a1c2b3d-0000-4000-8000-00000000beef"
AUDIENCE = "api://entrabot-fleet-test"
TOKEN_A = "static-token-aaaaaaaaaaaaaaaaaaaa"
TOKEN_B = "static-token-bbbbbbbbbbbbbbbbbbbb"


def _initialize(token: str | None = None, **extra: str) -> dict[str, str]:
    headers = {**MCP_HEADERS, **extra}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


# --- static tokens ---


async def test_missing_token_gets_401_pointing_at_the_resource_metadata(
    http: httpx.AsyncClient,
) -> None:
    async with live_mcp(mcp_settings(mcp_static_tokens=TOKEN_A)) as live:
        response = await http.post(
            live.url, json=initialize_body("claude-code"), headers=_initialize()
        )
        assert response.status_code == 401
        challenge = response.headers["www-authenticate"]
        assert (
            challenge
            == f'Bearer resource_metadata="{live.base_url}/.well-known/oauth-protected-resource"'
        )
        metadata = await http.get(f"{live.base_url}/.well-known/oauth-protected-resource")
        assert metadata.status_code == 200
        assert metadata.json()["resource"] == f"{live.base_url}/mcp"
        assert metadata.json()["bearer_methods_supported"] == ["header"]
        assert live.mcp.sessions.sessions() == []


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "bearer token refused"]


async def test_wrong_static_token_gets_401_invalid_token_and_one_log_line_with_the_reason(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "not-it-" + uuid.uuid4().hex
    async with live_mcp(mcp_settings(mcp_static_tokens=TOKEN_A)) as live:
        with caplog.at_level(logging.INFO, logger="service.mcp.bearer"):
            response = await http.post(
                live.url, json=initialize_body("claude-code"), headers=_initialize(wrong)
            )
            anonymous = await http.post(
                live.url, json=initialize_body("claude-code"), headers=_initialize()
            )
        assert response.status_code == 401 and anonymous.status_code == 401
        assert 'error="invalid_token"' in response.headers["www-authenticate"]
        assert "resource_metadata=" in response.headers["www-authenticate"]
    first, second = (r.__dict__ for r in refusals(caplog))
    assert (first["status"], first["reason"], first["peer"]) == (
        401,
        "matches no static token",
        "127.0.0.1",
    )
    assert (second["status"], second["reason"]) == (401, "no bearer token")
    assert not any(wrong in str(r.__dict__) for r in caplog.records)


async def test_a_session_answers_only_the_token_that_opened_it(http: httpx.AsyncClient) -> None:
    async with live_mcp(mcp_settings(mcp_static_tokens=f"{TOKEN_A},{TOKEN_B}")) as live:
        opened = await http.post(
            live.url, json=initialize_body("claude-code"), headers=_initialize(TOKEN_A)
        )
        assert opened.status_code == 200
        session_id = opened.headers["mcp-session-id"]
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        as_a = {**session_headers(session_id), "Authorization": f"Bearer {TOKEN_A}"}
        as_b = {**session_headers(session_id), "Authorization": f"Bearer {TOKEN_B}"}
        own = await http.post(live.url, json=call, headers=as_a)
        assert own.status_code == 200
        other = await http.post(live.url, json=call, headers=as_b)
        assert other.status_code == 404  # another principal cannot even learn the session exists


# --- Entra JWTs, against a JWKS endpoint served by the test ---


@dataclass
class Tenant:
    authority: str
    key: rsa.RSAPrivateKey
    kid: str

    @property
    def issuer(self) -> str:
        return f"{self.authority}/{TENANT}/v2.0"

    def token(
        self, *, key: rsa.RSAPrivateKey | None = None, kid: str | None = None, **claims: Any
    ) -> str:
        now = int(time.time())
        body = {
            "aud": AUDIENCE,
            "iss": self.issuer,
            "iat": now,
            "nbf": now,
            "exp": now + 600,
            "azp": "claude-code-app",
            "oid": "host-user-oid",
            "scp": "mcp.access",
        }
        body.update(claims)
        return jwt.encode(
            body, key or self.key, algorithm="RS256", headers={"kid": kid or self.kid}
        )


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def foreign_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
async def tenant(signing_key: rsa.RSAPrivateKey) -> AsyncIterator[Tenant]:
    kid = uuid.uuid4().hex
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(signing_key.public_key(), as_dict=True)

    async def keys(_: Any) -> JSONResponse:
        return JSONResponse({"keys": [{**jwk, "kid": kid, "use": "sig", "alg": "RS256"}]})

    app = Starlette(routes=[Route(f"/{TENANT}/discovery/v2.0/keys", keys)])
    async with serve_app(app) as server:
        yield Tenant(server.base_url, signing_key, kid)


def _jwt_settings(tenant: Tenant) -> Any:
    return mcp_settings(
        authority=tenant.authority,
        tenant_id=TENANT,
        mcp_jwt_audience=AUDIENCE,
        mcp_jwt_required_scopes="mcp.access",
    )


async def test_entra_token_with_the_right_audience_and_issuer_is_accepted(
    tenant: Tenant, http: httpx.AsyncClient
) -> None:
    async with live_mcp(_jwt_settings(tenant)) as live:
        response = await http.post(
            live.url, json=initialize_body("claude-code"), headers=_initialize(tenant.token())
        )
        assert response.status_code == 200
        assert live.mcp.sessions.get(response.headers["mcp-session-id"]) is not None
        metadata = (
            await http.get(f"{live.base_url}/.well-known/oauth-protected-resource/mcp")
        ).json()
        assert metadata["authorization_servers"] == [tenant.issuer]
        assert metadata["scopes_supported"] == [f"{AUDIENCE}/.default", f"{AUDIENCE}/mcp.access"]


@pytest.mark.parametrize(
    "case",
    ["wrong_audience", "wrong_issuer", "expired", "unknown_key", "wrong_signature"],
)
async def test_entra_token_is_rejected(
    tenant: Tenant,
    foreign_key: rsa.RSAPrivateKey,
    http: httpx.AsyncClient,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = int(time.time())
    token = {
        "wrong_audience": lambda: tenant.token(aud="api://someone-else"),
        "wrong_issuer": lambda: tenant.token(iss=f"{tenant.authority}/other-tenant/v2.0"),
        "expired": lambda: tenant.token(exp=now - 3600, iat=now - 7200, nbf=now - 7200),
        "unknown_key": lambda: tenant.token(key=foreign_key, kid="not-a-published-kid"),
        "wrong_signature": lambda: tenant.token(key=foreign_key),
    }[case]()
    async with live_mcp(_jwt_settings(tenant)) as live:
        with caplog.at_level(logging.INFO, logger="service.mcp.bearer"):
            response = await http.post(
                live.url, json=initialize_body("claude-code"), headers=_initialize(token)
            )
        assert response.status_code == 401
        assert 'error="invalid_token"' in response.headers["www-authenticate"]
        assert live.mcp.sessions.sessions() == []
    # The operator's line names the failed check, and never carries the token.
    [refusal] = refusals(caplog)
    assert (
        refusal.__dict__["reason"]
        == {
            "wrong_audience": "a JWT that fails InvalidAudienceError",
            "wrong_issuer": "a JWT that fails InvalidIssuerError",
            "expired": "a JWT that fails ExpiredSignatureError",
            "unknown_key": "a JWT signed by a key the tenant does not publish",
            "wrong_signature": "a JWT that fails InvalidSignatureError",
        }[case]
    )
    assert not any(token in str(r.__dict__) for r in caplog.records)


# --- DNS rebinding ---


async def test_bad_origin_gets_403_and_an_allowed_one_passes(http: httpx.AsyncClient) -> None:
    async with live_mcp(mcp_settings(mcp_allowed_origins="http://localhost:*")) as live:
        body = initialize_body("claude-code")
        bad = await http.post(
            live.url, json=body, headers=_initialize(Origin="http://evil.example")
        )
        assert bad.status_code == 403
        good = await http.post(
            live.url, json=body, headers=_initialize(Origin="http://localhost:5173")
        )
        assert good.status_code == 200


async def test_bad_host_gets_421_before_auth(http: httpx.AsyncClient) -> None:
    async with live_mcp(mcp_settings(mcp_static_tokens=TOKEN_A)) as live:
        body = initialize_body("claude-code")
        response = await http.post(
            live.url, json=body, headers=_initialize(Host="rebound.example:80")
        )
        assert response.status_code == 421
        # The same for an id that names no session: the check does not depend on session state.
        listed = await http.post(
            live.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={**session_headers("f" * 32), "Host": "rebound.example"},
        )
        assert listed.status_code == 421


# --- units: the middleware, the key cache, the start-up check ---


async def test_the_token_never_travels_past_the_middleware() -> None:
    seen: dict[str, Any] = {}

    async def downstream(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = BearerAuth(downstream, verifier=StaticTokenVerifier([TOKEN_A]))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.post("/mcp", headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert response.status_code == 204
    assert all(name != b"authorization" for name, _ in seen["headers"])
    assert seen["user"].access_token.token == VERIFIED_TOKEN_PLACEHOLDER
    assert seen["user"].access_token.client_id == "static-token-0"
    assert TOKEN_A not in repr(seen)


async def test_jwks_is_fetched_once_for_concurrent_unknown_keys_and_then_rate_limited() -> None:
    fetches = 0
    now = 1000.0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal fetches
        fetches += 1
        return httpx.Response(200, json={"keys": []})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        cache = JwksCache(
            "https://login.example/keys", http, min_refresh_interval_s=60, clock=lambda: now
        )
        assert await asyncio.gather(*(cache.key(f"kid-{i}") for i in range(5))) == [None] * 5
        assert fetches == 1
        assert await cache.key("kid-x") is None
        assert fetches == 1  # a forged key id cannot make every request a fetch
        now += 61
        assert await cache.key("kid-x") is None
        assert fetches == 2


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"host": "0.0.0.0"}, "not a loopback address"),
        (
            {"mcp_jwt_audience": AUDIENCE, "mcp_jwt_required_roles": "Entrabot.Host"},
            "ENTRABOT_TENANT_ID is not",
        ),
        (
            {"mcp_jwt_audience": AUDIENCE, "tenant_id": TENANT},
            "neither ENTRABOT_MCP_JWT_REQUIRED_ROLES nor",
        ),
        (
            {
                "mcp_jwt_audience": AUDIENCE,
                "tenant_id": TENANT,
                "mcp_jwt_allowed_client_ids": "app-1",
            },
            "neither ENTRABOT_MCP_JWT_REQUIRED_ROLES nor",
        ),
        ({"mcp_jwt_required_roles": "Entrabot.Host"}, "ENTRABOT_MCP_JWT_AUDIENCE is not"),
        ({"mcp_static_tokens": " , "}, "holds no token"),
    ],
)
def test_unsafe_or_half_set_auth_is_refused_at_start_up(
    overrides: dict[str, Any], problem: str
) -> None:
    with pytest.raises(AuthConfigError, match=problem):
        check_auth_config(mcp_settings(**overrides))


@pytest.mark.parametrize(
    "overrides",
    [
        {"host": "127.0.0.1"},
        {"host": "::1"},
        {"host": "localhost"},
        {"host": "0.0.0.0", "mcp_static_tokens": TOKEN_A},
        {
            "host": "0.0.0.0",
            "mcp_jwt_audience": AUDIENCE,
            "tenant_id": TENANT,
            "mcp_jwt_required_roles": "A",
        },
        {
            "host": "0.0.0.0",
            "mcp_jwt_audience": AUDIENCE,
            "tenant_id": TENANT,
            "mcp_jwt_required_scopes": "a",
        },
    ],
)
def test_loopback_or_authenticated_configs_start(overrides: dict[str, Any]) -> None:
    check_auth_config(mcp_settings(**overrides))
