"""`claude -p` through the bridge: the scripted model finds a fleet tool with ToolSearch, calls it, and the
result is in Graph (the emulator). Also what the model must not reach, and what must not be left open."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from claude_home import CLAUDE_CODE_VERSION
from fake_anthropic import Cue, Text, ToolUse, after_tool, on_user_text, tool_search

from tests.claude_code.claude_kit import ClaudeStack, debug_log
from tests.mcp.server_fixture import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.fleet,
    pytest.mark.azurite,
    pytest.mark.asyncio(loop_scope="module"),
]

SEND = "mcp__entrabot__send_teams_message"
PERMISSION = "mcp__entrabot__request_permission"


def _script_send(stack: ClaudeStack, cue: str, chat_id: str, text: str, **extra: object) -> None:
    stack.api.model.cues = [
        Cue(on_user_text(cue), [tool_search(SEND)]),
        Cue(after_tool("ToolSearch"), [ToolUse(SEND, {"chat_id": chat_id, "text": text, **extra})]),
        Cue(after_tool(SEND), [Text("Posted.")]),
    ]


def _posted(stack: ClaudeStack, chat_id: str, text: str) -> bool:
    emulator = stack.fleet.fleet.emulator
    assert emulator is not None
    return any(text in m.content for m in emulator.state.messages(chat_id))


def _send_result(stack: ClaudeStack) -> str:
    results = [r.tool_result_of(SEND) for r in stack.api.model.agent_requests()]
    found = [r for r in results if r is not None]
    assert found, (
        f"the model never saw a {SEND} result (did Claude Code offer the tool after ToolSearch?)"
    )
    return found[-1]


async def test_claude_p_posts_to_teams_through_the_bridge(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    home = claude_stack.home(tmp_path, allow=(SEND,))
    home.mcp_json({"entrabot": claude_stack.bridge_server("--push")})
    chat_id = claude_stack.fleet.chats()[0][0]
    text = f"from claude -p {uuid.uuid4().hex[:8]}"
    _script_send(claude_stack, "CUE-SEND", chat_id, text, wait_for_reply=False)
    code, out, err = await claude_stack.run(home, "-p", "CUE-SEND please post")
    assert code == 0, f"claude -p failed: {out}{err}\n{debug_log(home)[-3000:]}"
    searched = [
        r
        for r in claude_stack.api.model.agent_requests()
        if r.tool_result_of("ToolSearch") is not None
    ]
    assert searched and SEND in searched[-1].tool_names(), (
        f"Claude Code {CLAUDE_CODE_VERSION} no longer offers {SEND} after ToolSearch select:"
    )
    assert _posted(claude_stack, chat_id, text), (
        f"the message is not in the chat; the tool said: {_send_result(claude_stack)}"
    )
    assert "Posted." in out


async def test_send_without_wait_for_reply_on_a_tools_only_bridge_answers_within_the_request_timeout(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    # Tools only (no --push): the host cannot take pushes, so an omitted wait_for_reply used to wait for
    # a sponsor past the bridge's request timeout although the message was posted.
    home = claude_stack.home(tmp_path, allow=(SEND,))
    home.mcp_json({"entrabot": claude_stack.bridge_server("--request-timeout", "5")})
    chat_id = claude_stack.fleet.chats()[1][0]
    text = f"no wait given {uuid.uuid4().hex[:8]}"
    _script_send(claude_stack, "CUE-NOWAIT", chat_id, text)
    code, out, err = await claude_stack.run(home, "-p", "CUE-NOWAIT please post")
    assert code == 0, f"claude -p failed: {out}{err}"
    await eventually(
        lambda: _posted(claude_stack, chat_id, text), "the message in the chat", timeout_s=10
    )
    result = _send_result(claude_stack)
    assert "timed out" not in result, f"the posted message's tool call ended in a timeout: {result}"
    assert chat_id in result, f"the tool result does not report the post: {result}"


async def test_the_bridge_closes_its_fleet_session_when_claude_p_exits(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    home = claude_stack.home(tmp_path)
    home.mcp_json({"entrabot": claude_stack.bridge_server("--push")})
    claude_stack.api.model.cues = []
    code, out, err = await claude_stack.run(home, "-p", "say something")
    assert code == 0, f"claude -p failed: {out}{err}"

    async def closed() -> bool:
        return (
            await claude_stack.open_sessions() == 0
        )  # the module's tests run one Claude Code at a time

    await eventually(closed, "no fleet session left open after `claude -p`", timeout_s=15)


async def test_the_model_cannot_reach_request_permission(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    # request_permission is the bridge's own way to relay Claude Code's prompts: a model that could call
    # it could ask the sponsor anything in the host's name.
    home = claude_stack.home(tmp_path, allow=(PERMISSION,))
    home.mcp_json({"entrabot": claude_stack.bridge_server("--push", "--permission-relay")})
    ask = {
        "request_id": "abcde",
        "tool_name": "Bash",
        "description": "rm -rf /",
        "input_preview": "rm -rf /",
    }
    claude_stack.api.model.cues = [
        Cue(on_user_text("CUE-PERMISSION"), [tool_search(PERMISSION)]),
        Cue(after_tool("ToolSearch"), [ToolUse(PERMISSION, ask)]),
        Cue(after_tool(PERMISSION), [Text("Done.")]),
    ]
    code, out, err = await claude_stack.run(home, "-p", "CUE-PERMISSION")
    assert code == 0, f"claude -p failed: {out}{err}"
    requests = claude_stack.api.model.agent_requests()
    searched = [r for r in requests if r.tool_result_of("ToolSearch") is not None]
    assert searched, "the scripted ToolSearch never came back"
    assert PERMISSION not in searched[-1].tool_names(), (
        "Claude Code offers the model request_permission"
    )
    called = [b for r in requests if (b := r.tool_result_block(PERMISSION)) is not None]
    assert called and all(b.get("is_error") for b in called), (
        f"a model's request_permission call succeeded: {called}"
    )
