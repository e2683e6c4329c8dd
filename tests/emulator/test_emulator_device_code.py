"""Entra's device authorization grant and refresh tokens, as the emulator serves them over HTTP: the
device code, polling while it is pending, a person approving it through the admin API, expiry, a
decline, codes of another client, and refresh tokens that replace themselves and stop at a revocation."""

from __future__ import annotations

from typing import Any

import httpx
import jwt
import pytest

from emulator import ManualClock, RunningEmulator
from emulator.sign_in_grants import DEVICE_CODE_GRANT
from tests.emulator.emulator_testkit import GRAPH_SCOPE, Entra, assert_entra_error, bearer

SIGN_IN_SCOPE = f"{GRAPH_SCOPE} offline_access openid profile"


def _start(
    emu: RunningEmulator,
    http: httpx.Client,
    *,
    client_id: str | None = None,
    scope: str = SIGN_IN_SCOPE,
) -> httpx.Response:
    return http.post(
        f"{emu.base_url}/{emu.seed.tenant_id}/oauth2/v2.0/devicecode",
        data={"client_id": client_id or emu.seed.public_client.app_id, "scope": scope},
    )


def _poll(entra: Entra, device_code: str, client_id: str | None = None) -> httpx.Response:
    return entra.post(
        grant_type=DEVICE_CODE_GRANT,
        client_id=client_id or entra.seed.public_client.app_id,
        device_code=device_code,
    )


def _approve(
    emu: RunningEmulator, http: httpx.Client, user_code: str, user: str | None, **extra: Any
) -> httpx.Response:
    return http.post(
        f"{emu.admin_url}/devicecodes/approve", json={"user_code": user_code, "user": user, **extra}
    )


@pytest.fixture
def started(emu: RunningEmulator, http: httpx.Client) -> dict[str, Any]:
    response = _start(emu, http)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_device_code_names_the_code_the_page_and_the_polling_terms(
    started: dict[str, Any], emu: RunningEmulator
) -> None:
    assert set(started) == {
        "user_code",
        "device_code",
        "verification_uri",
        "expires_in",
        "interval",
        "message",
    }
    assert started["expires_in"] == 900 and started["interval"] == 5  # Entra's defaults
    assert started["verification_uri"] == f"{emu.base_url}/devicelogin"
    assert (
        started["user_code"] in started["message"]
        and started["verification_uri"] in started["message"]
    )


def test_polling_before_the_person_signs_in_is_authorization_pending_70016(
    entra: Entra, started: dict[str, Any]
) -> None:
    assert_entra_error(_poll(entra, started["device_code"]), 400, "authorization_pending", 70016)


def test_an_approved_code_yields_the_persons_tokens_once(
    entra: Entra, emu: RunningEmulator, http: httpx.Client, started: dict[str, Any]
) -> None:
    grace = emu.seed.humans[1]
    assert (
        _approve(emu, http, started["user_code"].lower(), grace.user_principal_name).status_code
        == 201
    )
    response = _poll(entra, started["device_code"])
    assert response.status_code == 200, response.text
    body = response.json()
    assert {
        "access_token",
        "refresh_token",
        "id_token",
        "client_info",
        "expires_in",
        "scope",
    } <= set(body)
    claims = jwt.decode(body["access_token"], options={"verify_signature": False})
    assert (
        claims["oid"] == grace.id
        and claims["idtyp"] == "user"
        and claims["upn"] == grace.user_principal_name
    )
    assert claims["appid"] == emu.seed.public_client.app_id
    me = http.get(f"{emu.graph_url}/me", headers=bearer(body["access_token"]))
    assert me.status_code == 200 and me.json()["id"] == grace.id  # Graph takes it as Grace's
    assert_entra_error(_poll(entra, started["device_code"]), 400, "invalid_grant", 70000)


def test_a_code_past_its_lifetime_is_expired_token_70019(
    entra: Entra,
    emu: RunningEmulator,
    http: httpx.Client,
    clock: ManualClock,
    started: dict[str, Any],
) -> None:
    clock.advance(started["expires_in"])
    assert_entra_error(_poll(entra, started["device_code"]), 400, "expired_token", 70019)
    refused = _approve(emu, http, started["user_code"], emu.seed.humans[0].user_principal_name)
    assert refused.status_code == 400 and "no pending device code" in refused.text


def test_a_declined_code_is_authorization_declined(
    entra: Entra, emu: RunningEmulator, http: httpx.Client, started: dict[str, Any]
) -> None:
    assert _approve(emu, http, started["user_code"], None, decline=True).status_code == 201
    assert_entra_error(_poll(entra, started["device_code"]), 400, "authorization_declined", 70000)


def test_an_unknown_or_another_clients_code_is_bad_verification_code_70018(
    entra: Entra, emu: RunningEmulator, started: dict[str, Any]
) -> None:
    assert_entra_error(_poll(entra, "not-a-code"), 400, "bad_verification_code", 70018)
    # The blueprint is confidential: it may not even ask (sign-in flows are for public clients).
    assert_entra_error(
        _poll(entra, started["device_code"], client_id=emu.seed.blueprint.app_id),
        401,
        "invalid_client",
        7000218,
    )


def test_only_a_public_client_may_ask_for_a_device_code_and_only_with_a_valid_scope(
    emu: RunningEmulator, http: httpx.Client
) -> None:
    assert_entra_error(
        _start(emu, http, client_id=emu.seed.blueprint.app_id), 401, "invalid_client", 7000218
    )
    assert_entra_error(_start(emu, http, scope="openid profile"), 400, "invalid_scope", 70011)


def test_an_agent_user_cannot_approve_a_code(
    emu: RunningEmulator, http: httpx.Client, started: dict[str, Any]
) -> None:
    refused = _approve(emu, http, started["user_code"], emu.seed.agent_user.user_principal_name)
    assert refused.status_code == 400 and "agent user" in refused.text


def _signed_in(
    entra: Entra, emu: RunningEmulator, http: httpx.Client, started: dict[str, Any]
) -> dict[str, Any]:
    _approve(emu, http, started["user_code"], emu.seed.humans[0].user_principal_name)
    response = _poll(entra, started["device_code"])
    assert response.status_code == 200, response.text
    return response.json()


def _refresh(entra: Entra, refresh_token: str, **extra: str) -> httpx.Response:
    return entra.post(
        grant_type="refresh_token",
        client_id=entra.seed.public_client.app_id,
        refresh_token=refresh_token,
        **extra,
    )


def test_a_refresh_token_replaces_itself_and_the_old_one_still_works(
    entra: Entra, emu: RunningEmulator, http: httpx.Client, started: dict[str, Any]
) -> None:
    first = _signed_in(entra, emu, http, started)["refresh_token"]
    again = _refresh(entra, first, scope=SIGN_IN_SCOPE)
    assert again.status_code == 200, again.text
    second = again.json()["refresh_token"]
    assert second != first
    assert (
        jwt.decode(again.json()["access_token"], options={"verify_signature": False})["oid"]
        == emu.seed.humans[0].id
    )
    assert _refresh(entra, first).status_code == 200  # Entra does not revoke the old one
    assert http.get(f"{emu.admin_url}/refresh_tokens").json() == {"redeemed": 2}


def test_a_refresh_token_is_refused_once_revoked_and_for_another_client(
    entra: Entra, emu: RunningEmulator, http: httpx.Client, started: dict[str, Any]
) -> None:
    token = _signed_in(entra, emu, http, started)["refresh_token"]
    other = entra.post(
        grant_type="refresh_token",
        client_id=emu.seed.blueprint.app_id,
        refresh_token=token,
        client_secret="blueprint-dev-secret",
    )
    assert_entra_error(other, 401, "invalid_client", 7000218)
    revoked = http.post(
        f"{emu.admin_url}/revoke", json={"user": emu.seed.humans[0].user_principal_name}
    ).json()
    assert revoked["refresh_tokens_revoked"] == 1
    assert_entra_error(_refresh(entra, token), 400, "invalid_grant", 50173)
    assert_entra_error(_refresh(entra, "0.made-up"), 400, "invalid_grant", 9002313)


def test_a_refresh_token_unused_past_its_lifetime_is_expired_700082(
    entra: Entra,
    emu: RunningEmulator,
    http: httpx.Client,
    clock: ManualClock,
    started: dict[str, Any],
) -> None:
    token = _signed_in(entra, emu, http, started)["refresh_token"]
    clock.advance(emu.seed.refresh_token_lifetime_s)
    assert_entra_error(_refresh(entra, token), 400, "invalid_grant", 700082)


def test_the_openid_configuration_names_the_device_authorization_endpoint(
    emu: RunningEmulator, http: httpx.Client
) -> None:
    document = http.get(
        f"{emu.base_url}/{emu.seed.tenant_id}/v2.0/.well-known/openid-configuration"
    ).json()
    assert (
        document["device_authorization_endpoint"]
        == f"{emu.base_url}/{emu.seed.tenant_id}/oauth2/v2.0/devicecode"
    )
