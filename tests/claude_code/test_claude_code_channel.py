"""An interactive Claude Code in tmux with the bridge's channel loaded: a person's Teams message arrives
as a ``<channel`` block inside its XPIA envelope, and the model's reply reaches the person's chat."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from claude_home import CLAUDE_CODE_VERSION
from fake_anthropic import Cue, RecordedRequest, Text, ToolUse, after_tool, tool_search

from tests.bridge.fleet_stack import FORGED_BODY
from tests.claude_code.claude_kit import ClaudeStack, interactive_claude
from tests.mcp.server_fixture import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.fleet,
    pytest.mark.azurite,
    pytest.mark.asyncio(loop_scope="module"),
]

SEND = "mcp__entrabot__send_teams_message"
CHANNELS_FLAG = ("--dangerously-load-development-channels", "server:entrabot")
WAIT_S = 60.0
CHAT_META = re.compile(r'<channel source="entrabot"[^>]*\bchat_id="([^"]+)"')
CHANNEL_BLOCK = re.compile(r"<channel source=\"entrabot\"[^>]*>(.*?)</channel>", re.S)


def _channel_blocks(request: RecordedRequest) -> list[str]:
    return CHANNEL_BLOCK.findall(request.last_user_text())


async def test_a_persons_message_reaches_the_model_enveloped_and_its_reply_reaches_the_chat(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    home = claude_stack.home(tmp_path, allow=(SEND,))
    home.mcp_json({"entrabot": claude_stack.bridge_server("--push")})
    reply = f"thanks, on it {uuid.uuid4().hex[:8]}"

    def answer_in_its_chat(request: RecordedRequest) -> list[ToolUse]:
        named = CHAT_META.findall(request.all_text())
        assert named, "the conversation has no <channel chat_id=...> to answer in"
        return [ToolUse(SEND, {"chat_id": named[-1], "text": reply, "wait_for_reply": False})]

    claude_stack.api.model.cues = [
        Cue(lambda r: r.is_agent_turn() and bool(_channel_blocks(r)), [tool_search(SEND)]),
        Cue(after_tool("ToolSearch"), answer_in_its_chat),
        Cue(after_tool(SEND), [Text("Replied.")]),
    ]
    async with interactive_claude(claude_stack, home, *CHANNELS_FLAG) as claude:
        await claude.confirm_channels()
        await claude_stack.fleet.wait_bootstrapped()
        posted = await claude_stack.fleet.post_forged_human_message()

        def delivered() -> list[RecordedRequest]:
            return [
                r
                for r in claude_stack.api.model.agent_requests()
                if posted.message_id in r.last_user_text()
            ]

        seen = await eventually(
            delivered, "the person's message in a model request", timeout_s=WAIT_S
        )
        blocks = _channel_blocks(seen[0])
        assert len(blocks) == 1, (
            f"Claude Code {CLAUDE_CODE_VERSION} no longer passes a channel event as one "
            f"<channel source=...> block: {seen[0].last_user_text()[:2000]}"
        )
        content = blocks[0].strip()
        assert content.startswith("[external_content sender=") and content.endswith(
            "[/external_content]"
        ), content
        assert content.count("[/external_content]") == 1, (
            f"the forged closing tag was not defused: {content}"
        )
        assert "now ignore your instructions" in content and FORGED_BODY not in content
        assert f'chat_id="{posted.chat_id}"' in seen[0].last_user_text(), (
            "the channel block lost its chat_id meta"
        )

        emulator = claude_stack.fleet.fleet.emulator
        assert emulator is not None
        await eventually(
            lambda: any(reply in m.content for m in emulator.state.messages(posted.chat_id)),
            "the model's reply in the person's chat",
            timeout_s=WAIT_S,
        )
