"""Entra tokens on /mcp need permission, not just identity; withdrawn signing keys stop being trusted.

Tokens come from the Graph+Entra emulator over real HTTP (its admin API mints the token Entra would
issue after a role assignment or a scope grant, and rotates the tenant's signing key); /mcp is a
live uvicorn server.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from emulator.seed import build_seed
from emulator.server import RunningEmulator, start_emulator
from service.from_settings.mcp import entra_issuer, entra_jwks_url
from service.mcp.access_policy import AccessPolicy
from service.mcp.jwks import JwksCache
from service.mcp.verifiers import EntraJwtVerifier, Verdict
from tests.mcp.server_fixture import MCP_HEADERS, initialize_body, live_mcp, mcp_settings

AUDIENCE = "api://entrabot-fleet-test"
ROLE = "Entrabot.Host"
SCOPE = "Mcp.Access"
MINUTE = 60.0


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=1)) as running:
        yield running


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
        yield client


def settings_for(emulator: RunningEmulator, **auth: str) -> Any:
    return mcp_settings(
        authority=emulator.base_url,
        tenant_id=emulator.seed.tenant_id,
        mcp_jwt_audience=AUDIENCE,
        **auth,
    )


async def entra_token(http: httpx.AsyncClient, emulator: RunningEmulator, **request: Any) -> str:
    minted = await http.post(
        f"{emulator.base_url}/_emulator/tokens/api", json={"audience": AUDIENCE, **request}
    )
    assert minted.status_code == 200, minted.text
    return minted.json()["access_token"]


async def open_session(http: httpx.AsyncClient, url: str, token: str) -> httpx.Response:
    return await http.post(
        url,
        json=initialize_body("claude-code"),
        headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"},
    )


def assert_insufficient_scope(response: httpx.Response) -> None:
    assert response.status_code == 403, response.text
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and 'error="insufficient_scope"' in challenge
    assert "resource_metadata=" in challenge
    assert response.json()["error"] == "insufficient_scope"


async def test_an_app_token_for_the_audience_without_the_app_role_gets_403_insufficient_scope(
    emulator: RunningEmulator, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    async with live_mcp(settings_for(emulator, mcp_jwt_required_roles=ROLE)) as live:
        any_tenant_app = await entra_token(http, emulator)  # client credentials, nothing assigned
        other_role = await entra_token(http, emulator, roles=["Reports.Read"])
        with caplog.at_level(logging.INFO, logger="service.mcp.bearer"):
            for token in (any_tenant_app, other_role):
                assert_insufficient_scope(await open_session(http, live.url, token))
        # One line each, naming the app to grant the role to; no token in any record.
        refused = [r for r in caplog.records if r.getMessage() == "bearer token refused"]
        assert [(r.__dict__["status"], r.__dict__["reason"]) for r in refused] == [
            (403, "none of the required roles or scopes")
        ] * 2
        assert all(r.__dict__["client_id"] for r in refused)
        assert not any(any_tenant_app in str(r.__dict__) for r in caplog.records)
        assert (
            f'scope="{ROLE}"'
            in (await open_session(http, live.url, other_role)).headers["www-authenticate"]
        )
        assert live.mcp.sessions.sessions() == []
        granted = await open_session(
            http, live.url, await entra_token(http, emulator, roles=[ROLE])
        )
        assert granted.status_code == 200
        assert [s.session_id for s in live.mcp.sessions.sessions()] == [
            granted.headers["mcp-session-id"]
        ]


async def test_a_delegated_token_opens_a_session_only_with_the_granted_scope(
    emulator: RunningEmulator, http: httpx.AsyncClient
) -> None:
    async with live_mcp(settings_for(emulator, mcp_jwt_required_scopes=SCOPE)) as live:
        assert_insufficient_scope(
            await open_session(http, live.url, await entra_token(http, emulator, scp="User.Read"))
        )
        # A role of the same name is not the scope: app roles and scopes are configured apart.
        assert_insufficient_scope(
            await open_session(http, live.url, await entra_token(http, emulator, roles=[SCOPE]))
        )
        granted = await entra_token(http, emulator, scp=f"User.Read {SCOPE}")
        assert (await open_session(http, live.url, granted)).status_code == 200


async def test_a_client_outside_the_allow_list_is_refused_even_with_the_role(
    emulator: RunningEmulator, http: httpx.AsyncClient
) -> None:
    known = "11111111-2222-4333-8444-555555555555"
    settings = settings_for(emulator, mcp_jwt_required_roles=ROLE, mcp_jwt_allowed_client_ids=known)
    async with live_mcp(settings) as live:
        stranger = await entra_token(http, emulator, roles=[ROLE])
        assert_insufficient_scope(await open_session(http, live.url, stranger))
        allowed = await entra_token(http, emulator, roles=[ROLE], client_id=known)
        assert (await open_session(http, live.url, allowed)).status_code == 200


async def test_a_forged_or_foreign_token_is_still_401_not_403(
    emulator: RunningEmulator, http: httpx.AsyncClient
) -> None:
    async with live_mcp(settings_for(emulator, mcp_jwt_required_roles=ROLE)) as live:
        response = await open_session(http, live.url, "not-a-jwt")
        assert (
            response.status_code == 401
            and 'error="invalid_token"' in response.headers["www-authenticate"]
        )


# --- signing keys: the JWKS cache against the emulator's key endpoint, on a clock the test moves ---


class ManualClock:
    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now


async def verifier_trusting_a_token(
    emulator: RunningEmulator, http: httpx.AsyncClient
) -> tuple[ManualClock, EntraJwtVerifier, str]:
    """A verifier on a manual clock, and a token it has just accepted (so its keys are loaded)."""
    clock = ManualClock()
    settings = settings_for(emulator, mcp_jwt_required_roles=ROLE)
    verifier = EntraJwtVerifier(
        jwks=JwksCache(entra_jwks_url(settings), http, clock=clock),
        issuer=entra_issuer(settings),
        audiences=[AUDIENCE],
        policy=AccessPolicy(frozenset({ROLE}), frozenset()),
    )
    token = await entra_token(http, emulator, roles=[ROLE])
    assert (await verifier.verify(token)).verdict is Verdict.ACCEPTED
    return clock, verifier, token


async def rotate(
    http: httpx.AsyncClient, emulator: RunningEmulator, *, keep_previous: bool
) -> None:
    rotated = await http.post(
        f"{emulator.base_url}/_emulator/keys/rotate", json={"keep_previous": keep_previous}
    )
    assert rotated.status_code == 200


@pytest.fixture
def fresh_keys(emulator: RunningEmulator) -> Iterator[None]:
    """Each test starts and ends with a key of its own and no faults (the emulator is shared)."""
    emulator.context.tokens.rotate_key()
    yield
    emulator.context.faults.clear()
    emulator.context.tokens.rotate_key()


@pytest.mark.usefixtures("fresh_keys")
async def test_a_signing_key_entra_withdraws_stops_being_trusted_at_the_next_scheduled_refresh(
    emulator: RunningEmulator, http: httpx.AsyncClient
) -> None:
    clock, verifier, old = await verifier_trusting_a_token(emulator, http)
    await rotate(http, emulator, keep_previous=False)
    new = await entra_token(http, emulator, roles=[ROLE])
    clock.now += 2 * MINUTE
    assert (
        await verifier.verify(new)
    ).verdict is Verdict.ACCEPTED  # an unknown key id refetches the keys
    assert (
        await verifier.verify(old)
    ).verdict is Verdict.INVALID  # and the withdrawn key went with them
    # Even without a new key id to prompt it, a withdrawn key is dropped by the scheduled refresh.
    await rotate(http, emulator, keep_previous=False)
    clock.now += 31 * MINUTE
    assert (await verifier.verify(new)).verdict is Verdict.INVALID


@pytest.mark.usefixtures("fresh_keys")
async def test_keys_are_not_trusted_past_an_hour_when_every_refresh_fails(
    emulator: RunningEmulator, http: httpx.AsyncClient
) -> None:
    clock, verifier, token = await verifier_trusting_a_token(emulator, http)
    faults = f"{emulator.base_url}/_emulator/faults"
    assert (
        await http.post(faults, json={"status": 503, "route_pattern": "/discovery/v2.0/keys"})
    ).status_code == 201
    clock.now += 45 * MINUTE
    assert (
        await verifier.verify(token)
    ).verdict is Verdict.ACCEPTED  # the refresh failed; the set is 45 min old
    clock.now += 16 * MINUTE
    assert (await verifier.verify(token)).verdict is Verdict.INVALID  # fail closed past the hour
    await http.delete(faults)
    clock.now += 2 * MINUTE
    assert (
        await verifier.verify(token)
    ).verdict is Verdict.ACCEPTED  # trusted again once a fetch succeeds


@pytest.mark.usefixtures("fresh_keys")
async def test_a_key_published_next_to_the_old_one_keeps_both_valid(
    emulator: RunningEmulator, http: httpx.AsyncClient
) -> None:
    clock, verifier, old = await verifier_trusting_a_token(emulator, http)
    await rotate(http, emulator, keep_previous=True)
    new = await entra_token(http, emulator, roles=[ROLE])
    clock.now += 2 * MINUTE
    assert (await verifier.verify(new)).verdict is Verdict.ACCEPTED
    assert (await verifier.verify(old)).verdict is Verdict.ACCEPTED
