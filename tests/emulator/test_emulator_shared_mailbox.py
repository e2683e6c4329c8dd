"""A mailbox shared with the signed-in user, read at /users/{id | userPrincipalName}/…: with Mail.Read.Shared
and the owner's grant; 403 ErrorAccessDenied without either."""

from __future__ import annotations

import httpx
import pytest

from emulator import RunningEmulator
from emulator.seed import Seed, SeedUser
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer


def _shared(emu: RunningEmulator, name: str) -> SeedUser:
    return next(
        u
        for u in emu.seed.users
        if u.shared_mailbox and u.user_principal_name.startswith(name + "@")
    )


def _deliver(emu: RunningEmulator, http: httpx.Client, to: SeedUser, subject: str) -> str:
    response = http.post(
        emu.admin_url + "/mail",
        json={
            "to": to.user_principal_name,
            "from": "customer@example.org",
            "subject": subject,
            "body": "Where is my order?",
        },
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_the_agent_reads_a_shared_mailbox_it_was_given_by_id_and_by_upn(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    support = _shared(emu, "support")
    mail_id = _deliver(emu, http, support, "Order 7")
    for ref in (support.id, support.user_principal_name):
        listed = http.get(f"{emu.graph_url}/users/{ref}/mailFolders/inbox/messages", headers=agent)
        assert listed.status_code == 200, listed.text
        assert [m["subject"] for m in listed.json()["value"]] == ["Order 7"]
        assert listed.json()["@odata.context"].endswith(f"users('{support.id}')/messages")
    everything = http.get(
        f"{emu.graph_url}/users/{support.user_principal_name}/messages", headers=agent
    ).json()
    assert [m["id"] for m in everything["value"]] == [mail_id]
    one = http.get(f"{emu.graph_url}/users/{support.id}/messages/{mail_id}", headers=agent)
    assert one.status_code == 200 and one.json()["subject"] == "Order 7"
    assert "Order 7" not in [
        m["subject"]
        for m in http.get(f"{emu.graph_url}/me/messages", headers=agent).json()["value"]
    ]  # not the agent's own mailbox


def test_a_mailbox_nobody_shared_with_the_agent_is_403_access_denied(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    finance = _shared(emu, "finance")
    mail_id = _deliver(emu, http, finance, "Payroll")
    for path in ("messages", "mailFolders/inbox/messages", f"messages/{mail_id}"):
        response = http.get(
            f"{emu.graph_url}/users/{finance.user_principal_name}/{path}", headers=agent
        )
        error = assert_graph_error(response, 403, "ErrorAccessDenied")
        assert error["message"] == "Access is denied. Check credentials and try again."
    # A person's own mailbox is not shared with the agent either.
    ada = emu.seed.humans[0]
    assert_graph_error(
        http.get(f"{emu.graph_url}/users/{ada.id}/messages", headers=agent),
        403,
        "ErrorAccessDenied",
    )
    # Ada was given finance@, so her token reads it.
    ada_headers = bearer(entra.human_token(ada.user_principal_name))
    assert (
        http.get(f"{emu.graph_url}/users/{finance.id}/messages", headers=ada_headers).status_code
        == 200
    )


def test_without_mail_read_shared_even_a_granted_mailbox_is_403(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    support = _shared(emu, "support")
    own_mail_only = bearer(entra.agent_token(scope="https://graph.microsoft.com/Mail.ReadWrite"))
    response = http.get(f"{emu.graph_url}/users/{support.id}/messages", headers=own_mail_only)
    assert_graph_error(response, 403, "ErrorAccessDenied")
    assert (
        http.get(
            f"{emu.graph_url}/users/{emu.seed.agent_user.id}/messages", headers=own_mail_only
        ).status_code
        == 200
    )  # its own mailbox by id


def test_an_unknown_mailbox_is_404_invalid_user(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    response = http.get(
        f"{emu.graph_url}/users/nobody@contoso.onmicrosoft.com/messages", headers=agent
    )
    assert_graph_error(response, 404, "ErrorInvalidUser")


def test_an_app_only_token_without_mail_read_is_denied(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    finance = _shared(emu, "finance")
    # The agent identity's own app-only token holds AgentIdentity.ReadWrite.All, not Mail.Read.
    response = http.get(
        f"{emu.graph_url}/users/{finance.id}/messages", headers=bearer(entra.identity_app_token())
    )
    assert_graph_error(response, 403, "ErrorAccessDenied")


def test_a_seed_refuses_a_mailbox_reader_who_is_not_a_user(emu: RunningEmulator) -> None:
    users = [u.model_dump() for u in emu.seed.users]
    users[-1]["mailbox_readers"] = ["ghost@contoso.onmicrosoft.com"]
    with pytest.raises(
        ValueError, match="mailbox reader 'ghost@contoso.onmicrosoft.com' is not a user"
    ):
        Seed.model_validate({**emu.seed.model_dump(), "users": users})
    assert {u.display_name for u in emu.seed.users if u.shared_mailbox}.isdisjoint(
        u.display_name for u in emu.seed.humans
    )  # a shared mailbox is nobody to chat with
