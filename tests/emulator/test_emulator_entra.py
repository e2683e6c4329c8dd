"""Entra's token endpoint: the three agent-user hops, each with its credential kinds, and each hop's
failures with Entra's error class and AADSTS code; the password grant; the published keys."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import jwt

from emulator import ManualClock, RunningEmulator
from emulator.dev_credentials import DevCertificate, DevIssuer, make_certificate, make_issuer
from tests.emulator.emulator_testkit import (
    EXCHANGE_SCOPE,
    GRAPH_SCOPE,
    JWT_BEARER,
    SECRET,
    SIBLING_IDENTITY,
    Entra,
    assert_entra_error,
)


def _claims(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


def test_hop1_with_secret_returns_t1_for_the_agent_identity(
    entra: Entra, emu: RunningEmulator
) -> None:
    body = entra.t1().json()
    claims = _claims(body["access_token"])
    assert body["token_type"] == "Bearer" and body["expires_in"] == emu.seed.token_lifetime_s
    assert claims["aud"] == "api://AzureADTokenExchange"
    assert claims["appid"] == emu.seed.blueprint.app_id
    assert claims["sub"] == emu.seed.agent_identity.id
    assert claims["iss"] == f"{emu.base_url}/{emu.seed.tenant_id}/v2.0"
    assert claims["exp"] - claims["iat"] == emu.seed.token_lifetime_s and claims["jti"]


def test_hop1_wrong_secret_is_invalid_client_7000215(entra: Entra) -> None:
    text = assert_entra_error(entra.t1(client_secret="nope"), 401, "invalid_client", 7000215)
    assert entra.seed.blueprint.app_id in text and "agent identity blueprint" in text


def test_hop1_unknown_client_is_700016(entra: Entra) -> None:
    response = entra.post(
        grant_type="client_credentials",
        client_id="00000000-0000-0000-0000-000000000001",
        scope=EXCHANGE_SCOPE,
        client_secret="x",
    )
    assert_entra_error(response, 400, "unauthorized_client", 700016)


def test_hop1_missing_credential_is_7000218(entra: Entra) -> None:
    response = entra.post(
        grant_type="client_credentials",
        client_id=entra.seed.blueprint.app_id,
        scope=EXCHANGE_SCOPE,
        fmi_path=entra.seed.agent_identity.id,
    )
    assert_entra_error(response, 401, "invalid_client", 7000218)


def test_hop1_fmi_path_must_name_a_child_agent_identity(entra: Entra) -> None:
    response = entra.post(
        grant_type="client_credentials",
        client_id=entra.seed.blueprint.app_id,
        scope=EXCHANGE_SCOPE,
        fmi_path="11111111-2222-3333-4444-555555555555",
        client_secret=SECRET,
    )
    assert_entra_error(response, 400, "unauthorized_client", 700016)


def test_hop1_with_certificate_assertion(
    entra: Entra, emu: RunningEmulator, certificate: DevCertificate, clock: ManualClock
) -> None:
    assertion = certificate.assertion(
        client_id=emu.seed.blueprint.app_id, token_endpoint=emu.token_endpoint, now=clock.now()
    )
    body = entra.t1(client_assertion_type=JWT_BEARER, client_assertion=assertion).json()
    assert _claims(body["access_token"])["sub"] == emu.seed.agent_identity.id


def test_hop1_certificate_not_registered_is_700027(
    entra: Entra, emu: RunningEmulator, clock: ManualClock
) -> None:
    stranger = make_certificate("not-registered")
    assertion = stranger.assertion(
        client_id=emu.seed.blueprint.app_id, token_endpoint=emu.token_endpoint, now=clock.now()
    )
    response = entra.t1(client_assertion_type=JWT_BEARER, client_assertion=assertion)
    assert "The key was not found" in assert_entra_error(response, 401, "invalid_client", 700027)


def test_hop1_certificate_assertion_for_another_audience_is_50013(
    entra: Entra, emu: RunningEmulator, certificate: DevCertificate, clock: ManualClock
) -> None:
    assertion = certificate.assertion(
        client_id=emu.seed.blueprint.app_id,
        token_endpoint=emu.token_endpoint,
        audience="https://login.example.com/other/oauth2/v2.0/token",
        now=clock.now(),
    )
    response = entra.t1(client_assertion_type=JWT_BEARER, client_assertion=assertion)
    assert_entra_error(response, 401, "invalid_client", 50013)


def test_hop1_expired_certificate_assertion_is_700024(
    entra: Entra, emu: RunningEmulator, certificate: DevCertificate, clock: ManualClock
) -> None:
    assertion = certificate.assertion(
        client_id=emu.seed.blueprint.app_id,
        token_endpoint=emu.token_endpoint,
        now=clock.now() - timedelta(hours=1),
        lifetime_s=600,
    )
    response = entra.t1(client_assertion_type=JWT_BEARER, client_assertion=assertion)
    assert_entra_error(response, 401, "invalid_client", 700024)


def test_hop1_with_workload_identity_federated_token(
    entra: Entra, issuer: DevIssuer, clock: ManualClock
) -> None:
    body = entra.t1(
        client_assertion_type=JWT_BEARER, client_assertion=issuer.token(now=clock.now())
    ).json()
    assert _claims(body["access_token"])["appid"] == entra.seed.blueprint.app_id


def test_hop1_federated_token_for_another_subject_is_700213(
    entra: Entra, issuer: DevIssuer, clock: ManualClock
) -> None:
    token = issuer.token("system:serviceaccount:other:intruder", now=clock.now())
    response = entra.t1(client_assertion_type=JWT_BEARER, client_assertion=token)
    assert_entra_error(response, 401, "invalid_client", 700213)


def test_hop1_federated_token_for_another_audience_is_700212(
    entra: Entra, issuer: DevIssuer, clock: ManualClock
) -> None:
    token = issuer.token(audience="api://SomethingElse", now=clock.now())
    response = entra.t1(client_assertion_type=JWT_BEARER, client_assertion=token)
    assert_entra_error(response, 401, "invalid_client", 700212)


def test_hop1_federated_token_from_an_untrusted_issuer_is_700211(
    entra: Entra, clock: ManualClock
) -> None:
    token = make_issuer("https://evil.example/oidc").token(now=clock.now())
    response = entra.t1(client_assertion_type=JWT_BEARER, client_assertion=token)
    assert_entra_error(response, 401, "invalid_client", 700211)


def test_hop1_federated_token_with_a_forged_signature_is_50013(
    entra: Entra, issuer: DevIssuer, clock: ManualClock
) -> None:
    forger = DevIssuer(
        issuer.issuer, make_issuer().key_pem, issuer.kid
    )  # right issuer and kid, wrong key
    response = entra.t1(
        client_assertion_type=JWT_BEARER, client_assertion=forger.token(now=clock.now())
    )
    assert_entra_error(response, 401, "invalid_client", 50013)


def test_hop2_exchanges_t1_for_the_agent_identity_token(entra: Entra) -> None:
    t1 = entra.t1().json()["access_token"]
    claims = _claims(entra.t2(t1).json()["access_token"])
    assert claims["appid"] == claims["sub"] == entra.seed.agent_identity.id
    assert claims["aud"] == "api://AzureADTokenExchange" and claims["idtyp"] == "app"


def test_hop2_rejects_a_t1_minted_for_another_agent_identity(entra: Entra) -> None:
    t1_for_sibling = entra.post(
        grant_type="client_credentials",
        client_id=entra.seed.blueprint.app_id,
        scope=EXCHANGE_SCOPE,
        fmi_path=SIBLING_IDENTITY,
        client_secret=SECRET,
    )
    assert t1_for_sibling.status_code == 200, t1_for_sibling.text
    text = assert_entra_error(
        entra.t2(t1_for_sibling.json()["access_token"]), 401, "invalid_client", 700213
    )
    assert f"client_id={entra.seed.agent_identity.id} (agent identity)" in text


def test_hop2_expired_t1_is_700024(entra: Entra, clock: ManualClock) -> None:
    t1 = entra.t1().json()["access_token"]
    clock.advance(entra.seed.token_lifetime_s + 1)
    assert_entra_error(entra.t2(t1), 401, "invalid_client", 700024)


def test_hop2_rejects_a_secret_because_agent_identities_have_none(entra: Entra) -> None:
    response = entra.post(
        grant_type="client_credentials",
        client_id=entra.seed.agent_identity.id,
        scope=EXCHANGE_SCOPE,
        client_secret=SECRET,
    )
    assert_entra_error(response, 401, "invalid_client", 7000215)


def test_hop3_returns_an_agent_user_token_for_graph(entra: Entra) -> None:
    t1 = entra.t1().json()["access_token"]
    t2 = entra.t2(t1).json()["access_token"]
    body = entra.user_token(t1, t2).json()
    claims = _claims(body["access_token"])
    user = entra.seed.agent_user
    assert (
        claims["idtyp"] == "user"
        and claims["oid"] == user.id
        and claims["upn"] == user.user_principal_name
    )
    assert claims["aud"] == "https://graph.microsoft.com" and claims["tid"] == entra.seed.tenant_id
    assert "Chat.ReadWrite" in claims["scp"].split() and claims["exp"] > claims["iat"]
    assert claims["appid"] == entra.seed.agent_identity.id


def test_hop3_accepts_the_upn_as_username(entra: Entra) -> None:
    t1 = entra.t1().json()["access_token"]
    t2 = entra.t2(t1).json()["access_token"]
    body = entra.user_token(t1, t2, username=entra.seed.agent_user.user_principal_name).json()
    assert _claims(body["access_token"])["oid"] == entra.seed.agent_user.id


def test_hop3_storage_scope_gives_a_storage_audience_token(entra: Entra) -> None:
    t1 = entra.t1().json()["access_token"]
    t2 = entra.t2(t1).json()["access_token"]
    body = entra.user_token(t1, t2, scope="https://storage.azure.com/.default").json()
    assert _claims(body["access_token"])["aud"] == "https://storage.azure.com"


def test_hop3_without_t2_is_900144(entra: Entra) -> None:
    t1 = entra.t1().json()["access_token"]
    response = entra.post(
        grant_type="user_fic",
        client_id=entra.seed.agent_identity.id,
        scope=GRAPH_SCOPE,
        client_assertion_type=JWT_BEARER,
        client_assertion=t1,
        user_id=entra.seed.agent_user.id,
    )
    assert "user_federated_identity_credential" in assert_entra_error(
        response, 400, "invalid_request", 900144
    )


def test_hop3_with_t1_in_place_of_t2_is_invalid_grant(entra: Entra) -> None:
    t1 = entra.t1().json()["access_token"]
    text = assert_entra_error(entra.user_token(t1, t1), 400, "invalid_grant", 50013)
    assert "grant_type=user_fic" in text


def test_hop3_for_a_human_instead_of_the_agent_user_is_refused(entra: Entra) -> None:
    t1 = entra.t1().json()["access_token"]
    t2 = entra.t2(t1).json()["access_token"]
    response = entra.user_token(t1, t2, user_id=entra.seed.humans[0].id)
    assert_entra_error(response, 400, "invalid_grant", 82001)


def test_hop3_for_an_unknown_user_is_50034(entra: Entra) -> None:
    t1 = entra.t1().json()["access_token"]
    t2 = entra.t2(t1).json()["access_token"]
    response = entra.user_token(t1, t2, user_id="99999999-0000-0000-0000-000000000000")
    assert_entra_error(response, 400, "invalid_grant", 50034)


def test_password_grant_gives_a_human_a_graph_token(entra: Entra) -> None:
    human = entra.seed.humans[1]
    response = entra.post(
        grant_type="password",
        client_id=entra.seed.public_client.app_id,
        username=human.user_principal_name,
        password="Passw0rd!",
        scope=GRAPH_SCOPE,
    )
    claims = _claims(response.json()["access_token"])
    assert claims["oid"] == human.id and claims["idtyp"] == "user"


def test_password_grant_with_a_wrong_password_is_50126(entra: Entra) -> None:
    response = entra.post(
        grant_type="password",
        client_id=entra.seed.public_client.app_id,
        username=entra.seed.humans[0].user_principal_name,
        password="wrong",
        scope=GRAPH_SCOPE,
    )
    assert_entra_error(response, 400, "invalid_grant", 50126)


def test_unknown_tenant_is_90002(emu: RunningEmulator, http: httpx.Client) -> None:
    response = http.post(
        f"{emu.base_url}/not-a-tenant/oauth2/v2.0/token",
        data={"grant_type": "client_credentials", "client_id": emu.seed.blueprint.app_id},
    )
    assert_entra_error(response, 400, "invalid_request", 90002)


def test_client_credentials_needs_a_default_scope_1002012(entra: Entra) -> None:
    response = entra.post(
        grant_type="client_credentials",
        client_id=entra.seed.blueprint.app_id,
        scope="https://graph.microsoft.com/Chat.Read",
        client_secret=SECRET,
    )
    assert_entra_error(response, 400, "invalid_scope", 1002012)


def test_tokens_verify_against_the_published_jwks_and_metadata(
    entra: Entra, emu: RunningEmulator, http: httpx.Client, clock: ManualClock
) -> None:
    metadata = http.get(
        f"{emu.base_url}/{emu.seed.tenant_id}/v2.0/.well-known/openid-configuration"
    ).json()
    assert metadata["token_endpoint"] == emu.token_endpoint
    keys = jwt.PyJWKSet.from_dict(http.get(metadata["jwks_uri"]).json())
    token = entra.agent_token()
    key = keys[jwt.get_unverified_header(token)["kid"]]
    claims = jwt.decode(
        token,
        key,
        algorithms=["RS256"],
        audience="https://graph.microsoft.com",
        issuer=metadata["issuer"],
        options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
    )
    assert claims["exp"] == int(clock.now().timestamp()) + emu.seed.token_lifetime_s
    assert datetime.fromtimestamp(claims["iat"], timezone.utc) == clock.now()
