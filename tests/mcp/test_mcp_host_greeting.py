"""What a handshake-era host is told at initialize: the channel and its instructions only if it is pushed to.

A non-push host declared ``claude/channel`` would wait for events that never come, and a model told
that messages arrive as ``<channel>`` events would never call the inbox tool. The 2026-07-28 side of
this (``server/discover``): test_mcp_stateless_era.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from mcp.client import Client
from mcp_types import Implementation
from pydantic import BaseModel

from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from service.mcp.instructions import FLEET_INSTRUCTIONS, HOST_INSTRUCTIONS, INBOX_INSTRUCTIONS
from service.mcp.sdk_adapter import (
    CHANNEL_CAPABILITY,
    PERMISSION_CAPABILITY,
    PERMISSION_REQUEST_METHOD,
)
from service.mcp.tool_registry import ToolCall
from tests.mcp.server_fixture import WAIT_BOUND_S, LiveMcp, demo_tools, live_mcp


class PermissionPrompt(BaseModel):
    request_id: str


@pytest.fixture
async def relaying() -> AsyncIterator[LiveMcp]:
    """The fleet's texts, and the permission relay registered (as a replica with sponsors has it)."""
    tools = demo_tools()

    async def ask_sponsors(args: PermissionPrompt, call: ToolCall) -> None:
        """Never asked here."""

    tools.add_host_notification(PERMISSION_REQUEST_METHOD, ask_sponsors)
    async with live_mcp(tools=tools, instructions=HOST_INSTRUCTIONS) as live:
        yield live


def legacy_client(live: LiveMcp, name: str) -> Client:
    return Client(
        live.url,
        mode="legacy",
        client_info=Implementation(name=name, version="1"),
        read_timeout_seconds=WAIT_BOUND_S,
    )


@pytest.mark.parametrize("name", ["codex-mcp-client", "claude-code", "gemini-cli-mcp-client"])
async def test_a_host_that_is_not_pushed_to_hears_of_no_channel(
    relaying: LiveMcp, name: str
) -> None:
    async with legacy_client(relaying, name) as client:
        assert client.protocol_version == "2025-11-25"
        experimental = client.server_capabilities.experimental or {}
        assert CHANNEL_CAPABILITY not in experimental
        assert PERMISSION_CAPABILITY not in experimental
        assert client.instructions == INBOX_INSTRUCTIONS
        assert "<channel>" not in client.instructions and "receive_messages" in client.instructions
        [state] = relaying.mcp.sessions.sessions()
        assert (state.client_name, state.push_capable) == (name, False)


async def test_the_bridges_push_name_is_told_of_the_channel_and_the_relay(
    relaying: LiveMcp,
) -> None:
    async with legacy_client(relaying, BRIDGE_PUSH_CLIENT_NAME) as client:
        experimental = client.server_capabilities.experimental or {}
        assert CHANNEL_CAPABILITY in experimental and PERMISSION_CAPABILITY in experimental
        assert client.instructions == FLEET_INSTRUCTIONS
        [state] = relaying.mcp.sessions.sessions()
        assert state.push_capable


async def test_a_push_host_without_the_relay_is_told_of_the_channel_only() -> None:
    async with (
        live_mcp(instructions=HOST_INSTRUCTIONS) as live,
        legacy_client(live, BRIDGE_PUSH_CLIENT_NAME) as client,
    ):
        assert (client.server_capabilities.experimental or {}) == {CHANNEL_CAPABILITY: {}}
