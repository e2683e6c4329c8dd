"""send_teams_message with HTML and @mentions of chat members, against the emulator over HTTP."""

from __future__ import annotations

from typing import Any

from tests.tools.tool_world import ToolWorld


async def test_a_member_is_mentioned_where_the_text_places_them(world: ToolWorld) -> None:
    chat = world.chat(1)  # the agent, Ada and Grace
    ada, grace = world.user("Ada"), world.user("Grace")
    out = await world.ok(
        "send_teams_message",
        {
            "chat_id": chat,
            "text": "@{0} and @{1}: the build <main> is green & ready",
            "mentions": [ada.user_principal_name, grace.id],
        },
        push=True,
    )
    [posted] = [m for m in world.emu.state.messages(chat) if m.id == out["message_id"]]
    assert posted.content_type == "html"
    assert posted.content == (
        f'<at id="0">{ada.display_name}</at> and <at id="1">{grace.display_name}</at>: '
        "the build &lt;main&gt; is green &amp; ready"
    )
    assert [(m.id, m.user_id) for m in posted.mentions] == [(0, ada.id), (1, grace.id)]


async def test_html_goes_out_as_html(world: ToolWorld) -> None:
    chat = world.chat(1)
    out = await world.ok(
        "send_teams_message",
        {"chat_id": chat, "text": "<b>Done</b>: deployed", "content_type": "html"},
        push=True,
    )
    [posted] = [m for m in world.emu.state.messages(chat) if m.id == out["message_id"]]
    assert (posted.content, posted.content_type, posted.mentions) == (
        "<b>Done</b>: deployed",
        "html",
        (),
    )


async def test_mentions_that_do_not_fit_post_nothing(world: ToolWorld) -> None:
    chat = world.chat(1)
    alan = world.user("Alan")  # not in chat 1
    cases: list[tuple[dict[str, Any], str]] = [
        ({"text": "hi @{0}", "mentions": [alan.id]}, "is not a member of chat"),
        ({"text": "hi @{1}", "mentions": [world.user("Ada").id]}, "@{1} has no person"),
        ({"text": "hi all", "mentions": [world.user("Ada").id]}, "is never placed in the text"),
        ({"text": "hi @{0}"}, "mentions is empty"),
        (
            {"text": "x" * 27_990 + " @{0}", "mentions": [world.user("Ada").id]},
            "Teams takes at most 28000",
        ),
    ]
    for arguments, expected in cases:
        text = await world.error("send_teams_message", {"chat_id": chat, **arguments}, push=True)
        assert expected in text and "Nothing was posted" in text, text
    assert world.emu.state.messages(chat) == []
