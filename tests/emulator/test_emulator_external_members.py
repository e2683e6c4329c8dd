"""Chat members of another tenant (Teams external access): each member's ``tenantId`` is the tenant the user
belongs to (Graph v1.0, aadUserConversationMember), whatever mail their tenant set."""

from __future__ import annotations

import httpx
import pytest

from emulator import RunningEmulator, Seed, load_seed
from emulator.seed import SeedUser, stable_id

FABRIKAM = stable_id("tenant", "fabrikam.example")
MALLORY = stable_id(FABRIKAM, "mallory")


@pytest.fixture(scope="session")
def seed(seed: Seed) -> Seed:
    """The conformance tenant, plus Mallory: a user of Fabrikam whose tenant gave her Ada's address."""
    mallory = SeedUser(
        id=MALLORY,
        user_principal_name="mallory@fabrikam.example",
        display_name="Mallory",
        mail=seed.humans[0].address,
        home_tenant_id=FABRIKAM,
    )
    return load_seed(
        {
            **seed.model_dump(),
            "users": [*(u.model_dump() for u in seed.users), mallory.model_dump()],
        }
    )


def test_a_member_shows_the_tenant_they_belong_to(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    ada = emu.seed.humans[0]
    created = http.post(
        f"{emu.admin_url}/chats", json={"members": [emu.seed.agent_user.id, ada.id, MALLORY]}
    )
    assert created.status_code == 201, created.text
    members = http.get(
        f"{emu.graph_url}/chats/{created.json()['id']}/members", headers=agent
    ).json()["value"]
    tenants = {m["userId"]: (m["tenantId"], m["email"]) for m in members}
    assert tenants[MALLORY] == (FABRIKAM, ada.address)
    assert tenants[ada.id] == (emu.seed.tenant_id, ada.address)
    assert tenants[emu.seed.agent_user.id][0] == emu.seed.tenant_id


def test_a_shared_address_never_shadows_the_user_who_holds_it(emu: RunningEmulator) -> None:
    ada = emu.seed.humans[0]
    found = emu.seed.find_user(ada.address)
    assert found is not None and found.id == ada.id


def test_an_external_users_tenant_must_be_another_tenant(seed: Seed) -> None:
    own = SeedUser(
        id="u-own",
        user_principal_name="x@fabrikam.example",
        display_name="X",
        home_tenant_id=seed.tenant_id,
    )
    with pytest.raises(ValueError, match="home_tenant_id is this tenant"):
        load_seed(
            {
                **seed.model_dump(),
                "users": [*(u.model_dump() for u in seed.users), own.model_dump()],
            }
        )
