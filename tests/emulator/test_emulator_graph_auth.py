"""Graph's checks on the bearer token: empty, expired, revoked, wrong audience, app-only on /me,
missing scopes; each answered with Graph's error body."""

from __future__ import annotations

import httpx

from emulator import ManualClock, RunningEmulator
from tests.emulator.emulator_testkit import SECRET, Entra, assert_graph_error, bearer


def test_missing_token_is_401_invalid_authentication_token(
    emu: RunningEmulator, http: httpx.Client
) -> None:
    error = assert_graph_error(
        http.get(emu.graph_url + "/me/chats"), 401, "InvalidAuthenticationToken"
    )
    assert error["message"] == "Access token is empty."


def test_expired_token_is_401_with_graph_error_body(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, clock: ManualClock
) -> None:
    headers = bearer(entra.agent_token(), **{"client-request-id": "my-correlation"})
    assert http.get(emu.graph_url + "/me/chats", headers=headers).status_code == 200
    clock.advance(emu.seed.token_lifetime_s)
    response = http.get(emu.graph_url + "/me/chats", headers=headers)
    error = assert_graph_error(response, 401, "InvalidAuthenticationToken")
    assert "expired" in error["message"]
    assert error["innerError"]["client-request-id"] == "my-correlation"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_revoked_token_is_401_and_a_fresh_token_works(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    old = bearer(entra.agent_token())
    assert http.post(emu.admin_url + "/revoke", json={"all": True}).json()["revoked"] >= 1
    error = assert_graph_error(
        http.get(emu.graph_url + "/me", headers=old), 401, "InvalidAuthenticationToken"
    )
    assert "TokenIssuedBeforeRevocationTimestamp" in error["message"]
    assert http.get(emu.graph_url + "/me", headers=bearer(entra.agent_token())).status_code == 200


def test_revoking_one_user_leaves_other_users_tokens_valid(
    emu: RunningEmulator,
    http: httpx.Client,
    entra: Entra,
    agent: dict[str, str],
    ada: dict[str, str],
) -> None:
    http.post(emu.admin_url + "/revoke", json={"user": emu.seed.humans[0].user_principal_name})
    assert http.get(emu.graph_url + "/me", headers=ada).status_code == 401
    assert http.get(emu.graph_url + "/me", headers=agent).status_code == 200


def test_storage_token_on_graph_is_401_invalid_audience(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    token = entra.agent_token(scope="https://storage.azure.com/.default")
    error = assert_graph_error(
        http.get(emu.graph_url + "/me", headers=bearer(token)), 401, "InvalidAuthenticationToken"
    )
    assert "audience" in error["message"]


def test_token_signed_by_another_tenant_key_is_401(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    from emulator import start_emulator

    with start_emulator(emu.seed) as other:  # same tenant, different signing key
        foreign = Entra(other, http).agent_token()
    assert_graph_error(
        http.get(emu.graph_url + "/me", headers=bearer(foreign)), 401, "InvalidAuthenticationToken"
    )


def test_app_only_token_on_me_is_400(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    response = entra.post(
        grant_type="client_credentials",
        client_id=emu.seed.blueprint.app_id,
        scope="https://graph.microsoft.com/.default",
        client_secret=SECRET,
    )
    error = assert_graph_error(
        http.get(emu.graph_url + "/me/chats", headers=bearer(response.json()["access_token"])),
        400,
        "BadRequest",
    )
    assert "delegated" in error["message"]


def test_exchange_token_is_not_a_graph_token(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    t1 = entra.t1().json()["access_token"]
    assert_graph_error(
        http.get(emu.graph_url + "/me", headers=bearer(t1)), 401, "InvalidAuthenticationToken"
    )


def test_missing_scope_is_403_naming_the_scopes_required(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    token = entra.post(
        grant_type="password",
        client_id=emu.seed.public_client.app_id,
        username=emu.seed.humans[0].user_principal_name,
        password="Passw0rd!",
        scope="User.Read",
    ).json()["access_token"]
    error = assert_graph_error(
        http.get(emu.graph_url + "/me/chats", headers=bearer(token)), 403, "Forbidden"
    )
    assert "Chat.Read" in error["message"]
    assert http.get(emu.graph_url + "/me", headers=bearer(token)).status_code == 200
