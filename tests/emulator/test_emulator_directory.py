"""Graph's directory reads: /me, users by id or UPN, and the agent identity's sponsors."""

from __future__ import annotations

import httpx
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator import RunningEmulator, Seed, start_emulator
from tests.emulator.emulator_testkit import SIBLING_IDENTITY, Entra, assert_graph_error, bearer


def test_me_is_the_token_user(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    me = http.get(emu.graph_url + "/me", headers=agent).json()
    assert (
        me["id"] == emu.seed.agent_user.id
        and me["userPrincipalName"] == emu.seed.agent_user.user_principal_name
    )


def test_user_by_id_or_upn_and_unknown_is_404(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    ada = emu.seed.humans[0]
    by_id = http.get(f"{emu.graph_url}/users/{ada.id}", headers=agent).json()
    by_upn = http.get(
        f"{emu.graph_url}/users/{ada.user_principal_name.upper()}", headers=agent
    ).json()
    assert by_id == by_upn and by_id["displayName"] == ada.display_name
    assert_graph_error(
        http.get(emu.graph_url + "/users/ghost@nowhere", headers=agent),
        404,
        "Request_ResourceNotFound",
    )


def test_sponsors_refuse_a_delegated_token(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    # "List agentIdentity sponsors": Delegated (work or school account): Not supported.
    identity = emu.seed.agent_identity.id
    for path in (
        f"/servicePrincipals/{identity}/microsoft.graph.agentIdentity/sponsors",
        f"/servicePrincipals/{identity}/sponsors",
    ):
        assert_graph_error(
            http.get(emu.graph_url + path, headers=agent), 403, "Authorization_RequestDenied"
        )


def test_sponsors_answer_the_identitys_app_only_token_with_directory_object_references(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    identity = emu.seed.agent_identity.id
    app_only = bearer(entra.identity_app_token())
    for path in (
        f"/servicePrincipals/{identity}/microsoft.graph.agentIdentity/sponsors",
        f"/servicePrincipals/{identity}/sponsors",
        f"/agentIdentities/{identity}/sponsors",
    ):
        response = http.get(emu.graph_url + path, headers=app_only)
        assert response.status_code == 200, response.text
        # References as the v1.0 page shows them, each with its type (a User to Microsoft's Graph SDK),
        # no profile.
        assert response.json()["value"] == [
            {
                "@odata.type": "#microsoft.graph.user",
                "id": emu.seed.humans[0].id,
                "deletedDateTime": None,
            }
        ]
    assert_graph_error(
        http.get(emu.graph_url + "/servicePrincipals/nope/sponsors", headers=app_only),
        404,
        "Request_ResourceNotFound",
    )


def test_sponsors_refuse_an_app_only_token_without_agent_identity_readwrite_all(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    # The sibling identity was granted no application permission.
    token = bearer(entra.identity_app_token(SIBLING_IDENTITY))
    path = f"/servicePrincipals/{emu.seed.agent_identity.id}/microsoft.graph.agentIdentity/sponsors"
    assert_graph_error(
        http.get(emu.graph_url + path, headers=token), 403, "Authorization_RequestDenied"
    )


def test_seed_switch_lets_a_delegated_token_read_sponsors(
    seed: Seed, signing_key: rsa.RSAPrivateKey, http: httpx.Client
) -> None:
    lenient = Seed.model_validate({**seed.model_dump(), "sponsors_delegated": True})
    with start_emulator(lenient, signing_key=signing_key) as emu:
        agent = bearer(Entra(emu, http).agent_token())
        response = http.get(
            f"{emu.graph_url}/servicePrincipals/{lenient.agent_identity.id}/sponsors", headers=agent
        )
        assert response.status_code == 200, response.text
        assert [u["id"] for u in response.json()["value"]] == [lenient.humans[0].id]


def test_a_group_sponsor_is_listed_with_its_type(
    seed: Seed, signing_key: rsa.RSAPrivateKey, http: httpx.Client
) -> None:
    group = "6a0c0000-0000-4000-8000-0000000a0c00"
    identity = seed.agent_identity.model_copy(update={"group_sponsors": (group,)})
    typed = Seed.model_validate({**seed.model_dump(), "agent_identities": [identity.model_dump()]})
    with start_emulator(typed, signing_key=signing_key) as emu:
        app_only = bearer(Entra(emu, http).identity_app_token())
        response = http.get(
            f"{emu.graph_url}/servicePrincipals/{typed.agent_identity.id}/sponsors",
            headers=app_only,
        )
        assert response.status_code == 200, response.text
        assert response.json()["value"] == [
            {
                "@odata.type": "#microsoft.graph.user",
                "id": typed.humans[0].id,
                "deletedDateTime": None,
            },
            {"@odata.type": "#microsoft.graph.group", "id": group, "deletedDateTime": None},
        ]
        # A group's id is no user's: /users/{id} (as the agent user resolves references) does not find it.
        agent = bearer(Entra(emu, http).agent_token())
        assert_graph_error(
            http.get(f"{emu.graph_url}/users/{group}", headers=agent),
            404,
            "Request_ResourceNotFound",
        )


def test_seed_switch_lists_sponsors_by_id_alone(
    seed: Seed, signing_key: rsa.RSAPrivateKey, http: httpx.Client
) -> None:
    # The shape Microsoft's entrabot code reports ("returns only id regardless of $select").
    bare = Seed.model_validate({**seed.model_dump(), "sponsors_shape": "id_only"})
    with start_emulator(bare, signing_key=signing_key) as emu:
        response = http.get(
            f"{emu.graph_url}/servicePrincipals/{bare.agent_identity.id}/sponsors",
            headers=bearer(Entra(emu, http).identity_app_token()),
        )
        assert response.json()["value"] == [{"id": bare.humans[0].id}]


def test_an_admin_removes_a_sponsor_and_the_next_list_omits_them(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    identity, ada = emu.seed.agent_identity.id, emu.seed.humans[0].id
    removed = http.delete(f"{emu.admin_url}/agent_identities/{identity}/sponsors/{ada}")
    assert removed.status_code == 200, removed.text
    response = http.get(
        f"{emu.graph_url}/servicePrincipals/{identity}/sponsors",
        headers=bearer(entra.identity_app_token()),
    )
    assert response.json()["value"] == []
    again = http.delete(f"{emu.admin_url}/agent_identities/{identity}/sponsors/{ada}")
    assert again.status_code == 400 and "is not a sponsor" in again.text
    http.post(
        f"{emu.admin_url}/agent_identities/{identity}/sponsors", json={"user": ada}
    ).raise_for_status()
    response = http.get(
        f"{emu.graph_url}/servicePrincipals/{identity}/sponsors",
        headers=bearer(entra.identity_app_token()),
    )
    assert [u["id"] for u in response.json()["value"]] == [ada]
