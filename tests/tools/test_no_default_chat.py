"""Every tool is registered with typed schemas, and no Teams tool falls back to a default chat."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.mcp.sdk_adapter import PERMISSION_REQUEST_METHOD
from tests.tools.tool_world import ToolWorld

ALL_TOOLS = {
    "send_teams_message",
    "receive_messages",
    "read_teams_messages",
    "create_chat",
    "list_watched_chats",
    "watch_teams_replies",
    "wait_for_sponsor_dm",
    "read_email",
    "add_promise",
    "list_promises",
    "resolve_promise",
    "read_interactions",
    "run_daily_summary",
    "edit_teams_message",
    "delete_teams_message",
    "list_chat_members",
    "whoami",
    "view_image",
    "add_chat_member",
    "send_adaptive_card",
    "view_image",
    "add_chat_member",
    "send_adaptive_card",
    "post_placeholder",
    "update_placeholder",
    "resolve_placeholder",
    "send_email",
    "catch_up",
    "resolve_file_url",
    "list_recent_files",
    "read_file",
    "write_text_file",
    "upload_file",
    "share_file",
    "add_file_comment",
    "list_channels",
    "read_channel",
    "read_thread",
    "post_in_channel",
    "reply_in_thread",
}
CHAT_TOOLS = [
    ("send_teams_message", {"text": "hello"}),
    ("read_teams_messages", {}),
    ("watch_teams_replies", {}),
    ("edit_teams_message", {"message_id": "1733140000000", "text": "fixed"}),
    ("delete_teams_message", {"message_id": "1733140000000"}),
    ("list_chat_members", {}),
    ("view_image", {"message_id": "1733140000000"}),
]


def documented_tools() -> set[str]:
    """The tools docs/tools.md lists, one row each (a row may name several)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "tools.md").read_text()
    rows = re.findall(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)*) \|", page, re.M)
    return {name for row in rows for name in re.findall(r"`([a-z_]+)`", row)}


async def test_every_tool_is_registered_with_a_description_and_both_schemas(
    world: ToolWorld,
) -> None:
    definitions = {d.name: d for d in world.tools.definitions()}
    assert set(definitions) == ALL_TOOLS == documented_tools()
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


@pytest.mark.parametrize(
    "chat_id", ["..", "19:a b@thread.v2", "19:a\x00b"], ids=["dots", "space", "control"]
)
async def test_a_chat_id_that_cannot_be_one_id_is_refused_before_graph(
    world: ToolWorld, chat_id: str
) -> None:
    text = await world.error("read_teams_messages", {"chat_id": chat_id})
    assert "chat_id must be one id" in text
