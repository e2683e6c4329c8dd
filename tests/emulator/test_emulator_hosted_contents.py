"""Inline images sent with a chat message, as Graph's "Create chatMessage in a channel or a chat" example
"Send inline images along with the message" shows them: hostedContents with temporary ids, stored as the
message's hosted contents, and the body's ``../hostedContents/{id}/$value`` rewritten to their Graph URL."""

from __future__ import annotations

import base64
import re

import httpx

from emulator import RunningEmulator
from seed_ids import seeded_chat_id
from tests.emulator.emulator_testkit import assert_graph_error

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
_STORED = re.compile(
    r'src="https://graph\.microsoft\.com/v1\.0/chats/([^/]+)/messages/(\d+)/hostedContents/([^/]+)/\$value"'
)


def _hosted(temporary_id: str, data: bytes = PNG) -> dict[str, str]:
    return {
        "@microsoft.graph.temporaryId": temporary_id,
        "contentBytes": base64.b64encode(data).decode(),
        "contentType": "image/png",
    }


def _post(
    emu: RunningEmulator, http: httpx.Client, headers: dict[str, str], chat: str, body: object
) -> httpx.Response:
    return http.post(f"{emu.graph_url}/chats/{chat}/messages", headers=headers, json=body)


def test_an_inline_image_is_stored_as_hosted_content_and_its_src_rewritten(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    assert chat is not None
    html = '<div><span><img height="297" src="../hostedContents/1/$value" width="297"></span></div>'
    sent = _post(
        emu,
        http,
        agent,
        chat,
        {"body": {"contentType": "html", "content": html}, "hostedContents": [_hosted("1")]},
    )
    assert sent.status_code == 201, sent.text
    message = sent.json()
    assert message["body"]["contentType"] == "html"
    assert "../hostedContents/" not in message["body"]["content"]
    found = _STORED.search(message["body"]["content"])
    assert found is not None and found.group(1, 2) == (chat, message["id"])
    hosted_id = found.group(3)
    listed = http.get(
        f"{emu.graph_url}/chats/{chat}/messages/{message['id']}/hostedContents", headers=agent
    ).json()["value"]
    assert listed == [{"id": hosted_id, "contentType": "image/png", "contentBytes": None}]
    value = http.get(
        f"{emu.graph_url}/chats/{chat}/messages/{message['id']}/hostedContents/{hosted_id}/$value",
        headers=agent,
    )
    assert value.status_code == 200 and value.content == PNG
    assert value.headers["content-type"] == "image/png"
    # The stored body is what a later read gives, not the temporary one.
    again = http.get(f"{emu.graph_url}/chats/{chat}/messages/{message['id']}", headers=agent)
    assert again.json()["body"]["content"] == message["body"]["content"]


def test_two_inline_images_each_get_their_own_hosted_content(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    assert chat is not None
    html = '<img src="../hostedContents/a/$value"><img src="../hostedContents/b/$value">'
    other = PNG + b"second"
    sent = _post(
        emu,
        http,
        agent,
        chat,
        {
            "body": {"contentType": "html", "content": html},
            "hostedContents": [_hosted("a"), _hosted("b", other)],
        },
    ).json()
    ids = [m.group(3) for m in _STORED.finditer(sent["body"]["content"])]
    assert len(set(ids)) == 2
    base = f"{emu.graph_url}/chats/{chat}/messages/{sent['id']}/hostedContents"
    assert [http.get(f"{base}/{i}/$value", headers=agent).content for i in ids] == [PNG, other]


def test_a_src_naming_no_temporary_id_is_400_and_posts_nothing(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    assert chat is not None
    before = len(emu.state.messages(chat))
    wrong = '<img src="../hostedContents/2/$value">'
    unplaced = "<p>no image here</p>"
    for body in (
        {"body": {"contentType": "html", "content": wrong}, "hostedContents": [_hosted("1")]},
        {"body": {"contentType": "html", "content": wrong}},
        {"body": {"contentType": "html", "content": unplaced}, "hostedContents": [_hosted("1")]},
        {"body": {"contentType": "text", "content": "text"}, "hostedContents": [_hosted("1")]},
        {
            "body": {"contentType": "html", "content": '<img src="../hostedContents/1/$value">'},
            "hostedContents": [{**_hosted("1"), "contentBytes": "not base64!"}],
        },
        {
            "body": {"contentType": "html", "content": '<img src="../hostedContents/1/$value">'},
            "hostedContents": [_hosted("1"), _hosted("1")],
        },
    ):
        assert_graph_error(_post(emu, http, agent, chat, body), 400, "BadRequest")
    assert len(emu.state.messages(chat)) == before
