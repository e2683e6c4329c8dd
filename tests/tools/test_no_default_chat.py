"""Every tool is registered with typed schemas, and no Teams tool falls back to a default chat."""

from __future__ import annotations

import pytest

from service.mcp.sdk_adapter import PERMISSION_REQUEST_METHOD
from tests.tools.tool_world import ToolWorld

ALL_TOOLS = {
    "send_teams_message", "read_teams_messages", "create_chat", "list_watched_chats", "watch_teams_replies",
    "wait_for_sponsor_dm", "read_email", "add_promise", "list_promises", "resolve_promise", "read_interactions",
    "run_daily_summary",
}
CHAT_TOOLS = [
    ("send_teams_message", {"text": "hello"}),
    ("read_teams_messages", {}),
    ("watch_teams_replies", {}),
]


async def test_every_tool_is_registered_with_a_description_and_both_schemas(world: ToolWorld) -> None:
    definitions = {d.name: d for d in world.tools.definitions()}
    assert set(definitions) == ALL_TOOLS
    # The permission relay (on by default) is a host notification of the bridge's session, never a tool.
    assert world.tools.handles(PERMISSION_REQUEST_METHOD)
    for definition in definitions.values():
        assert definition.description, definition.name
        assert definition.input_schema["type"] == "object"
        assert definition.output_schema is not None
    assert "chat_id" in definitions["send_teams_message"].input_schema["required"]
    send_schema = definitions["send_teams_message"].output_schema
    assert send_schema is not None
    send_out = send_schema["properties"]
    assert "_next_action" in send_out and "sponsor_reply" in send_out


@pytest.mark.parametrize(("tool", "arguments"), CHAT_TOOLS)
@pytest.mark.parametrize("chat_id", [None, "", "   "], ids=["missing", "empty", "blank"])
async def test_a_teams_tool_without_a_chat_id_says_there_is_no_default_chat(
    world: ToolWorld, tool: str, arguments: dict[str, str], chat_id: str | None
) -> None:
    given = dict(arguments) if chat_id is None else {**arguments, "chat_id": chat_id}
    text = await world.error(tool, given)
    assert "there is no default chat" in text
    assert "list_watched_chats" in text
    assert (await world.interactions.read()).records == ()  # nothing was sent or logged


@pytest.mark.parametrize(("tool", "arguments"), CHAT_TOOLS)
async def test_a_chat_that_is_neither_watched_nor_readable_is_refused(
    world: ToolWorld, tool: str, arguments: dict[str, str]
) -> None:
    text = await world.error(tool, {**arguments, "chat_id": "19:not-a-chat-of-the-agent@thread.v2"})
    assert "not a watched chat" in text and "create_chat" in text


@pytest.mark.parametrize("chat_id", ["..", "19:a b@thread.v2", "19:a\x00b"], ids=["dots", "space", "control"])
async def test_a_chat_id_that_cannot_be_one_id_is_refused_before_graph(world: ToolWorld, chat_id: str) -> None:
    text = await world.error("read_teams_messages", {"chat_id": chat_id})
    assert "chat_id must be one id" in text
