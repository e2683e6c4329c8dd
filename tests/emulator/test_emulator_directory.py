"""Graph's directory reads: /me, users by id or UPN, and the agent identity's sponsors."""

from __future__ import annotations

import httpx
from cryptography.hazmat.primitives.asymmetric import rsa
from emulator_testkit import SIBLING_IDENTITY, Entra, assert_graph_error, bearer

from emulator import RunningEmulator, Seed, start_emulator


def test_me_is_the_token_user(emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]) -> None:
    me = http.get(emu.graph_url + "/me", headers=agent).json()
    assert me["id"] == emu.seed.agent_user.id and me["userPrincipalName"] == emu.seed.agent_user.user_principal_name


def test_user_by_id_or_upn_and_unknown_is_404(emu: RunningEmulator, http: httpx.Client,
                                              agent: dict[str, str]) -> None:
    ada = emu.seed.humans[0]
    by_id = http.get(f"{emu.graph_url}/users/{ada.id}", headers=agent).json()
    by_upn = http.get(f"{emu.graph_url}/users/{ada.user_principal_name.upper()}", headers=agent).json()
    assert by_id == by_upn and by_id["displayName"] == ada.display_name
    assert_graph_error(http.get(emu.graph_url + "/users/ghost@nowhere", headers=agent), 404,
                       "Request_ResourceNotFound")


def test_sponsors_refuse_a_delegated_token(emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]) -> None:
    # "List agentIdentity sponsors": Delegated (work or school account): Not supported.
    identity = emu.seed.agent_identity.id
    for path in (f"/servicePrincipals/{identity}/microsoft.graph.agentIdentity/sponsors",
                 f"/servicePrincipals/{identity}/sponsors"):
        assert_graph_error(http.get(emu.graph_url + path, headers=agent), 403, "Authorization_RequestDenied")


def test_sponsors_answer_the_identitys_app_only_token_with_directory_object_references(
        emu: RunningEmulator, http: httpx.Client, entra: Entra) -> None:
    identity = emu.seed.agent_identity.id
    app_only = bearer(entra.identity_app_token())
    for path in (f"/servicePrincipals/{identity}/microsoft.graph.agentIdentity/sponsors",
                 f"/servicePrincipals/{identity}/sponsors", f"/agentIdentities/{identity}/sponsors"):
        response = http.get(emu.graph_url + path, headers=app_only)
        assert response.status_code == 200, response.text
        # References, as the documented directoryObject collection: type and id, no profile.
        assert response.json()["value"] == [
            {"@odata.type": "#microsoft.graph.user", "id": emu.seed.humans[0].id, "deletedDateTime": None}]
    assert_graph_error(http.get(emu.graph_url + "/servicePrincipals/nope/sponsors", headers=app_only), 404,
                       "Request_ResourceNotFound")


def test_sponsors_refuse_an_app_only_token_without_agent_identity_readwrite_all(
        emu: RunningEmulator, http: httpx.Client, entra: Entra) -> None:
    # The sibling identity was granted no application permission.
    token = bearer(entra.identity_app_token(SIBLING_IDENTITY))
    path = f"/servicePrincipals/{emu.seed.agent_identity.id}/microsoft.graph.agentIdentity/sponsors"
    assert_graph_error(http.get(emu.graph_url + path, headers=token), 403, "Authorization_RequestDenied")


def test_seed_switch_lets_a_delegated_token_read_sponsors(seed: Seed, signing_key: rsa.RSAPrivateKey,
                                                          http: httpx.Client) -> None:
    lenient = Seed.model_validate({**seed.model_dump(), "sponsors_delegated": True})
    with start_emulator(lenient, signing_key=signing_key) as emu:
        agent = bearer(Entra(emu, http).agent_token())
        response = http.get(f"{emu.graph_url}/servicePrincipals/{lenient.agent_identity.id}/sponsors", headers=agent)
        assert response.status_code == 200, response.text
        assert [u["id"] for u in response.json()["value"]] == [lenient.humans[0].id]
