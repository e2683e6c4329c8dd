"""Every Graph answer carries ``@odata.context`` as Graph writes it: the entity set (with the parent's
percent-encoded key) for a collection, and ``/$entity`` after it for one entity."""

from __future__ import annotations

from urllib.parse import quote

import httpx
from seed_ids import seeded_chat_id

from emulator import RunningEmulator


def test_single_entities_name_their_entity_set_and_entity(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    metadata = emu.graph_url + "/$metadata#"
    chat = seeded_chat_id(emu.seed, 0)
    messages = f"{metadata}chats('{quote(chat, safe='')}')/messages"
    posted = http.post(
        f"{emu.graph_url}/chats/{chat}/messages",
        headers=agent,
        json={"body": {"contentType": "text", "content": "hello"}},
    )
    assert posted.status_code == 201 and posted.json()["@odata.context"] == messages + "/$entity"
    got = http.get(
        f"{emu.graph_url}/chats/{chat}/messages/{posted.json()['id']}", headers=agent
    ).json()
    assert got["@odata.context"] == messages + "/$entity"
    assert (
        http.get(f"{emu.graph_url}/chats/{chat}/messages", headers=agent).json()["@odata.context"]
        == messages
    )
    assert (
        http.get(f"{emu.graph_url}/chats/{chat}", headers=agent).json()["@odata.context"]
        == metadata + "chats/$entity"
    )
    assert (
        http.get(f"{emu.graph_url}/me/chats", headers=agent).json()["@odata.context"]
        == metadata + "chats"
    )

    agent_id = emu.seed.agent_user.id
    delivered = http.post(
        emu.admin_url + "/mail",
        json={"to": agent_id, "from": "ada@example.org", "subject": "hi", "body": "hello"},
    )
    mail = http.get(f"{emu.graph_url}/me/messages/{delivered.json()['id']}", headers=agent).json()
    assert mail["@odata.context"] == f"{metadata}users('{agent_id}')/messages/$entity"
    assert mail["subject"] == "hi"
