"""Graph's directory reads: /me, users by id or UPN, and the agent identity's sponsors."""

from __future__ import annotations

import httpx
from emulator_testkit import assert_graph_error

from emulator import RunningEmulator


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


def test_sponsors_of_the_agent_identity_are_users(emu: RunningEmulator, http: httpx.Client,
                                                  agent: dict[str, str]) -> None:
    identity = emu.seed.agent_identity.id
    for path in (f"/servicePrincipals/{identity}/sponsors", f"/agentIdentities/{identity}/sponsors"):
        value = http.get(emu.graph_url + path, headers=agent).json()["value"]
        assert [(u["@odata.type"], u["id"]) for u in value] == [("#microsoft.graph.user", emu.seed.humans[0].id)]
    assert_graph_error(http.get(emu.graph_url + "/servicePrincipals/nope/sponsors", headers=agent), 404,
                       "Request_ResourceNotFound")
