"""The bridge between a stdio host and an in-process replica MCP server (real HTTP, real SDK clients)."""

from __future__ import annotations

from pathlib import Path

from service.mcp.sdk_adapter import CHANNEL_CAPABILITY
from service.delivery.hub import DispatchOutcome
from tests.bridge.bridge_host import bridge_host
from tests.mcp.server_fixture import LiveMcp, chat_message, eventually


async def test_tools_are_the_fleets_and_pushes_arrive_unchanged(live: LiveMcp, tmp_path: Path) -> None:
    async with bridge_host(live.url, tmp_path / "bridge.log") as (client, received):
        assert CHANNEL_CAPABILITY in (client.server_capabilities.experimental or {})
        tools = await client.list_tools()
        assert sorted(t.name for t in tools.tools) == ["echo", "wait_for_sponsor"]
        echoed = await client.call_tool("echo", {"text": "through the bridge"})
        assert echoed.structured_content is not None and echoed.structured_content["text"] == "through the bridge"

        await eventually(live.push_targets, "the bridge's push stream on the replica")
        messages = [chat_message(f"m-{i}") for i in range(3)]
        dispatched = await live.hub.dispatch(messages)
        assert [d.outcome for d in dispatched] == [DispatchOutcome.DELIVERED] * 3
        await eventually(lambda: len(received.channel) == 3, "three channel notifications")
        assert received.message_ids() == ["m-0", "m-1", "m-2"]
