"""send_adaptive_card: a card in a chat as Graph takes one, posted once, against the emulator over HTTP."""

from __future__ import annotations

import json

from tests.tools.tool_world import ToolWorld

CARD = {
    "type": "AdaptiveCard",
    "version": "1.5",
    "body": [
        {"type": "TextBlock", "text": "Deploy 42: green", "weight": "Bolder"},
        {"type": "FactSet", "facts": [{"title": "Region", "value": "westeurope"}]},
    ],
    "actions": [
        {"type": "Action.OpenUrl", "title": "Open the run", "url": "https://ci.example/run/42"}
    ],
}


async def test_a_card_is_posted_as_an_attachment_placed_in_the_body(world: ToolWorld) -> None:
    chat = world.chat(1)
    out = await world.ok("send_adaptive_card", {"chat_id": chat, "card": CARD}, push=True)
    assert out["post_outcome"] == "posted"
    [posted] = world.emu.state.messages(chat)
    [attachment] = posted.attachments
    assert attachment.content_type == "application/vnd.microsoft.card.adaptive"
    assert json.loads(attachment.content or "") == CARD
    assert (
        posted.content == f'<attachment id="{attachment.id}"></attachment>'
        and posted.content_type == "html"
    )


async def test_a_card_whose_answer_graph_lost_is_found_and_not_posted_twice(
    world: ToolWorld,
) -> None:
    chat = world.chat(1)
    await world.ok(
        "send_adaptive_card", {"chat_id": chat, "card": CARD}, push=True
    )  # an earlier card, same look
    await world.admin(
        "faults",
        {
            "status": 500,
            "method": "POST",
            "route_pattern": r"/chats/.*/messages$",
            "after_commit": True,
            "count": 1,
        },
    )
    out = await world.ok("send_adaptive_card", {"chat_id": chat, "card": CARD}, push=True)
    assert out["post_outcome"] == "found_after_lost_answer"
    messages = world.emu.state.messages(chat)
    assert (
        len(messages) == 2 and out["message_id"] == messages[-1].id
    )  # this card, not the earlier one


async def test_a_card_nobody_could_answer_is_refused(world: ToolWorld) -> None:
    chat = world.chat(1)
    submit = {**CARD, "actions": [{"type": "Action.Submit", "title": "Approve"}]}
    assert "needs a bot" in await world.error(
        "send_adaptive_card", {"chat_id": chat, "card": submit}
    )
    ask = {**CARD, "body": [{"type": "Input.Text", "id": "why"}]}
    assert "collects input" in await world.error(
        "send_adaptive_card", {"chat_id": chat, "card": ask}
    )
    assert "must be an Adaptive Card" in await world.error(
        "send_adaptive_card", {"chat_id": chat, "card": {"type": "Hero"}}
    )
    assert world.emu.state.messages(chat) == []
