"""The official Python MCP client against the live server: tools, and channel pushes on the handshake era.

Claude Code straight over HTTP is a push host only when the operator lists it in ENTRABOT_PUSH_HOSTS,
as the ``live`` server here does, and only on the handshake era (``mode="legacy"``); by default it
gets the tools only. The client's default mode settles on 2026-07-28, which has no session to push on
(test_mcp_stateless_era).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation
from tool_results import result_text

from service.delivery.hub import DispatchOutcome, TargetKind
from service.mcp.sdk_adapter import CHANNEL_CAPABILITY
from tests.mcp.server_fixture import (
    WAIT_BOUND_S,
    ChannelListener,
    LiveMcp,
    chat_message,
    eventually,
    live_mcp,
    mcp_settings,
)


@pytest.fixture
async def live() -> AsyncIterator[LiveMcp]:
    """A server whose operator listed Claude Code as a push host (ENTRABOT_PUSH_HOSTS=claude-code)."""
    async with live_mcp(mcp_settings(push_hosts="claude-code")) as server:
        yield server


def claude_code_client(live: LiveMcp, listener: ChannelListener, **options: Any) -> Client:
    return Client(
        live.url,
        extensions=[listener],
        client_info=Implementation(name="claude-code", version="2.1.0"),
        read_timeout_seconds=WAIT_BOUND_S,
        **options,
    )


async def test_push_reaches_a_listed_host_on_the_handshake_era(live: LiveMcp) -> None:
    listener = ChannelListener()
    async with claude_code_client(live, listener, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        assert CHANNEL_CAPABILITY in (client.server_capabilities.experimental or {})

        tools = await client.list_tools()
        assert {t.name for t in tools.tools} == {"echo", "wait_for_sponsor"}
        result = await client.call_tool("echo", {"text": "hi"})
        assert not result.is_error
        assert result.structured_content["text"] == "hi"
        assert result.structured_content["push_capable"] is True

        [target] = await eventually(
            live.push_targets, "the host's GET stream to become a push target"
        )
        assert target.target_id == f"push:{result.structured_content['session_id']}"
        [state] = live.mcp.sessions.sessions()
        assert (state.client_name, state.protocol_version, state.push_stream_open) == (
            "claude-code",
            "2025-11-25",
            True,
        )

        dispatched = await live.hub.dispatch([chat_message("m-1"), chat_message("m-2")])
        assert [d.outcome for d in dispatched] == [DispatchOutcome.DELIVERED] * 2
        await eventually(lambda: len(listener.pushes) == 2, "two channel pushes at the client")
        assert [p.meta["message_id"] for p in listener.pushes] == ["m-1", "m-2"]
        assert {p.meta["chat_id"] for p in listener.pushes} == {"19:demo@thread.v2"}
        assert all(p.meta["user"] for p in listener.pushes)

    # Leaving the client deletes the session: its push target goes with it.
    await eventually(lambda: not live.mcp.sessions.sessions(), "the session to end")
    assert live.hub.live_targets() == []


async def test_a_listed_host_in_the_default_mode_gets_the_tools_and_no_channel(
    live: LiveMcp,
) -> None:
    # The default mode settles on 2026-07-28: no session, so nothing to push on, and no channel is
    # declared even to a name the operator listed.
    listener = ChannelListener()
    async with claude_code_client(live, listener) as client:
        assert client.protocol_version == "2026-07-28"
        assert CHANNEL_CAPABILITY not in (client.server_capabilities.experimental or {})
        result = await client.call_tool("echo", {"text": "hi"})
        assert not result.is_error
        assert result.structured_content == {
            "text": "hi",
            "session_id": None,
            "push_capable": False,
        }
        assert live.mcp.sessions.sessions() == [] and live.push_targets() == []
        [dispatched] = await live.hub.dispatch([chat_message("m-1")])
        assert dispatched.outcome is DispatchOutcome.NO_TARGET
        assert listener.pushes == []


async def test_claude_code_over_http_gets_the_tools_but_no_pushes_by_default() -> None:
    # Claude Code drops channel events silently when the session did not load the channel, and its
    # initialize does not say (its channels reference): a push would be marked delivered and lost.
    listener = ChannelListener()
    async with (
        live_mcp() as default_live,
        claude_code_client(default_live, listener, mode="legacy") as client,
    ):
        result = await client.call_tool("echo", {"text": "hi"})
        assert not result.is_error and result.structured_content["push_capable"] is False
        [state] = await eventually(
            lambda: [s for s in default_live.mcp.sessions.sessions() if s.push_stream_open],
            "the host's GET stream",
        )
        assert (state.client_name, state.push_capable) == ("claude-code", False)
        assert default_live.push_targets() == []
        [dispatched] = await default_live.hub.dispatch([chat_message("m-1")])
        assert dispatched.outcome is DispatchOutcome.NO_TARGET
        assert listener.pushes == []


async def test_invalid_arguments_come_back_as_a_tool_error_naming_the_field(live: LiveMcp) -> None:
    async with claude_code_client(live, ChannelListener(), mode="legacy") as client:
        result = await client.call_tool("echo", {"txt": "typo"})
        assert result.is_error
        text = result_text(result)
        assert "text" in text and "Field required" in text
        assert "typo" not in text  # the rejected value is the host's data, not echoed into errors


async def test_unknown_tool_is_a_protocol_error(live: LiveMcp) -> None:
    async with claude_code_client(live, ChannelListener(), mode="legacy") as client:
        with pytest.raises(MCPError, match="Unknown tool"):
            await client.call_tool("no_such_tool", {})


async def test_a_sponsor_wait_takes_the_chat_message_it_waits_for(live: LiveMcp) -> None:
    async with Client(
        live.url, mode="legacy", client_info=Implementation(name="other-host", version="1")
    ) as client:
        call = asyncio.create_task(
            client.call_tool("wait_for_sponsor", {"chat_id": "19:sponsor@thread.v2"})
        )
        await eventually(
            lambda: any(t.kind is TargetKind.SPONSOR_WAIT for t in live.hub.live_targets()),
            "the wait",
        )
        [dispatch] = await live.hub.dispatch([chat_message("m-9", chat_id="19:sponsor@thread.v2")])
        assert dispatch.outcome is DispatchOutcome.DELIVERED
        result = await asyncio.wait_for(call, WAIT_BOUND_S)
        assert result.structured_content == {"message_id": "m-9", "chat_id": "19:sponsor@thread.v2"}
    assert live.hub.live_targets() == []


async def test_cancelling_a_sponsor_wait_unregisters_its_target(live: LiveMcp) -> None:
    async with Client(
        live.url, mode="legacy", client_info=Implementation(name="other-host", version="1")
    ) as client:
        call = asyncio.create_task(
            client.call_tool("wait_for_sponsor", {"chat_id": "19:sponsor@thread.v2"})
        )
        await eventually(
            lambda: any(t.kind is TargetKind.SPONSOR_WAIT for t in live.hub.live_targets()),
            "the wait",
        )
        call.cancel()  # the client sends notifications/cancelled for the request
        with pytest.raises(asyncio.CancelledError):
            await call
        await eventually(
            lambda: not any(t.kind is TargetKind.SPONSOR_WAIT for t in live.hub.live_targets()),
            "the server to unregister the cancelled wait",
        )
        # The session itself lives on: a non-push host never becomes a push target.
        [state] = live.mcp.sessions.sessions()
        assert state.push_capable is False
        assert live.push_targets() == []
