"""SIGKILL of the replica holding the bridge's fleet session, under a real Claude Code with the channel
loaded: messages from before and after reach the model, each exactly once. Its own module: the kill
would take a replica from the other modules' shared fleet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.devstack.traffic import Posted
from tests.claude_code.claude_kit import ClaudeStack, interactive_claude
from tests.mcp.server_fixture import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.fleet,
    pytest.mark.azurite,
    pytest.mark.asyncio(loop_scope="module"),
]

WAIT_S = 90.0
EACH_SIDE = 3


def _channel_count(stack: ClaudeStack, message_id: str) -> int:
    """How many ``<channel`` blocks carry ``message_id`` in the newest conversation the model was sent."""
    requests = stack.api.model.agent_requests()
    if not requests:
        return 0
    blocks = re.findall(r"<channel [^>]*>", requests[-1].all_text())
    return sum(f'message_id="{message_id}"' in b for b in blocks)


async def _post(stack: ClaudeStack, label: str) -> list[Posted]:
    sponsors = {s.id for s in stack.fleet.seed.sponsors}
    chat_id, human_id = next(
        (c, m) for c, members in stack.fleet.chats() for m in members if m not in sponsors
    )
    human = stack.fleet.seed.find_user(human_id)
    assert human is not None
    return [
        await stack.fleet.traffic.post_chat(human, chat_id, f"{label} {i}")
        for i in range(EACH_SIDE)
    ]


async def test_killing_the_replica_holding_the_bridges_session_loses_and_repeats_nothing(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    home = claude_stack.home(tmp_path)
    home.mcp_json({"entrabot": claude_stack.bridge_server("--push")})
    claude_stack.api.model.cues = []  # the model only reads: every event is one user turn
    async with interactive_claude(
        claude_stack, home, "--dangerously-load-development-channels", "server:entrabot"
    ) as claude:
        await claude.confirm_channels()
        await claude_stack.fleet.wait_bootstrapped()
        before = await _post(claude_stack, "before the kill")
        await eventually(
            lambda: all(_channel_count(claude_stack, p.message_id) for p in before),
            "the messages from before the kill at the model",
            timeout_s=WAIT_S,
        )

        holders = [name for name, n in (await claude_stack.sessions_by_replica()).items() if n > 0]
        assert len(holders) == 1, (
            f"expected one replica holding the bridge's session, found {holders}"
        )
        holder = next(m for m in claude_stack.fleet.fleet.members if m.name == holders[0])
        holder.kill()

        after = await _post(claude_stack, "after the kill")
        await eventually(
            lambda: all(_channel_count(claude_stack, p.message_id) for p in after),
            "the messages from after the kill at the model",
            timeout_s=WAIT_S,
        )
        counts = {p.message_id: _channel_count(claude_stack, p.message_id) for p in before + after}
        assert set(counts.values()) == {1}, f"a message reached the model other than once: {counts}"
