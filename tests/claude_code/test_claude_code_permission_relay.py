"""The permission relay with the real Claude Code: its prompt for a Bash call reaches the sponsor in
Teams, and the sponsor's ``yes <id>`` lets the call run, ``no <id>`` stops it."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from claude_home import CLAUDE_CODE_VERSION
from fake_anthropic import Cue, Text, ToolUse, after_tool, on_user_text

from tests.claude_code.claude_kit import ClaudeStack, InteractiveClaude, interactive_claude
from tests.mcp.server_fixture import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.fleet,
    pytest.mark.azurite,
    pytest.mark.asyncio(loop_scope="module"),
]

WAIT_S = 60.0
# Claude Code's request ids are five letters a-z without l (its channels reference; TOOLCHAIN.md); the
# fleet's DM ends 'Reply "yes <id>" to allow' (service/tools/permission_relay.py).
REQUEST_ID = re.compile(r'"yes ([a-km-z]{5})"')


def _bash_results(stack: ClaudeStack) -> list[dict[str, object]]:
    return [
        b
        for r in stack.api.model.agent_requests()
        if (b := r.tool_result_block("Bash")) is not None
    ]


async def _asked(stack: ClaudeStack, seen: set[str]) -> tuple[str, str]:
    """(the sponsor's DM, the request id) of a permission request the sponsor was asked, not in ``seen``."""
    emulator = stack.fleet.fleet.emulator
    assert emulator is not None
    sponsor = stack.fleet.seed.sponsors[0].id

    def asked() -> tuple[str, str] | None:
        for chat in emulator.state.chats_of(sponsor):
            for message in emulator.state.messages(chat.id):
                if (
                    "Bash" in message.content
                    and message.sender is not None
                    and message.sender.user_id != sponsor
                ):
                    fresh = [i for i in REQUEST_ID.findall(message.content) if i not in seen]
                    if fresh:
                        return chat.id, fresh[0]
        return None

    found: tuple[str, str] = await eventually(
        asked, "the sponsor's Teams DM asking about the Bash call", timeout_s=WAIT_S
    )
    return found


async def _sponsor_says(stack: ClaudeStack, chat_id: str, text: str) -> None:
    await stack.fleet.traffic.post_chat(stack.fleet.seed.sponsors[0], chat_id, text)


async def _prompt(claude: InteractiveClaude, text: str) -> None:
    await claude.tmux("send-keys", "-t", claude.session, "-l", text)
    await claude.tmux("send-keys", "-t", claude.session, "Enter")


async def test_a_sponsors_yes_runs_the_prompted_tool_and_no_stops_it(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    home = claude_stack.home(tmp_path)
    home.mcp_json({"entrabot": claude_stack.bridge_server("--push", "--permission-relay")})
    allowed, denied = (
        f"relay-allowed-{uuid.uuid4().hex[:6]}",
        f"relay-denied-{uuid.uuid4().hex[:6]}",
    )
    claude_stack.api.model.cues = [
        # A file write, not a read-only command: Claude Code runs those unprompted.
        Cue(
            on_user_text("CUE-ALLOW"),
            [ToolUse("Bash", {"command": f"touch {allowed}", "description": "Make a file"})],
        ),
        Cue(
            on_user_text("CUE-DENY"),
            [ToolUse("Bash", {"command": f"touch {denied}", "description": "Make a file"})],
        ),
        Cue(after_tool("Bash"), [Text("Done.")]),
    ]
    async with interactive_claude(
        claude_stack,
        home,
        "--permission-mode",
        "manual",
        "--dangerously-load-development-channels",
        "server:entrabot",
    ) as claude:
        await claude.confirm_channels()
        await _prompt(claude, "CUE-ALLOW")
        dm, first = await _asked(claude_stack, set())
        await _sponsor_says(claude_stack, dm, f"yes {first}")
        results = await eventually(
            lambda: _bash_results(claude_stack), "the allowed Bash call's result", timeout_s=WAIT_S
        )
        assert (home.project / allowed).exists() and not results[-1].get("is_error"), (
            f"Claude Code {CLAUDE_CODE_VERSION} did not run the tool the sponsor allowed: {results[-1]}"
        )

        await _prompt(claude, "CUE-DENY")
        dm, second = await _asked(claude_stack, {first})
        await _sponsor_says(claude_stack, dm, f"no {second}")
        results = await eventually(
            lambda: len(_bash_results(claude_stack)) >= 2 and _bash_results(claude_stack),
            "the denied Bash call's result",
            timeout_s=WAIT_S,
        )
        denial = results[-1]
        assert denial.get("is_error") and not (home.project / denied).exists(), (
            f"Claude Code {CLAUDE_CODE_VERSION} ran a tool the sponsor denied: {denial}"
        )
