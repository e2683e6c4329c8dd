"""What the host sees of the bridge: the handshake era, capabilities, tool errors, permission relay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel

from service.bridge.host_server import CHANNEL_CAPABILITY, PERMISSION_CAPABILITY
from service.delivery.hub import DispatchOutcome
from service.mcp.push_target import PushTarget
from tests.bridge.bridge_host import bridge_host
from tests.bridge.relay_fleet import fleet_server
from tests.mcp.server_fixture import LiveMcp, chat_message, eventually

NEWEST_HANDSHAKE = HANDSHAKE_PROTOCOL_VERSIONS[-1]


class _Notification(BaseModel):
    method: str
    params: dict[str, Any]


async def _bridge_target(live: LiveMcp) -> PushTarget:
    [target] = await eventually(live.push_targets, "the bridge's push stream on the replica")
    assert isinstance(target, PushTarget)
    return target


@pytest.mark.parametrize("mode", ["auto", "legacy"], ids=["probes-2026-07-28-first", "initialize-only"])
async def test_host_settles_on_the_handshake_era_and_gets_pushes(live: LiveMcp, tmp_path: Path, mode: str) -> None:
    # "auto" is the SDK client that sends server/discover at 2026-07-28 first, as Claude Code does.
    async with bridge_host(live.url, tmp_path / "bridge.log", mode=mode) as (client, received):
        assert client.session.initialize_result is not None
        assert client.session.initialize_result.protocol_version == NEWEST_HANDSHAKE
        assert CHANNEL_CAPABILITY in (client.server_capabilities.experimental or {})
        await _bridge_target(live)
        [outcome] = await live.hub.dispatch([chat_message(f"era-{mode}")])
        assert outcome.outcome is DispatchOutcome.DELIVERED
        await eventually(lambda: received.message_ids() == [f"era-{mode}"], "the push on the host")


async def test_fleet_error_becomes_a_tool_error_with_the_fleets_message(live: LiveMcp, tmp_path: Path) -> None:
    async with bridge_host(live.url, tmp_path / "bridge.log") as (client, _):
        result = await client.call_tool("no_such_tool", {})
        assert result.is_error
        assert [c.text for c in result.content if c.type == "text"] == ["Unknown tool: no_such_tool"]


async def test_without_push_flag_the_bridge_is_not_a_push_target(live: LiveMcp, tmp_path: Path) -> None:
    async with bridge_host(live.url, tmp_path / "bridge.log", args=()) as (client, _):
        echoed = await client.call_tool("echo", {"text": "tools only"})
        assert echoed.structured_content is not None and echoed.structured_content["push_capable"] is False
        assert live.push_targets() == []


async def test_permission_relay_is_declared_only_when_the_fleet_lists_request_permission(tmp_path: Path) -> None:
    async with fleet_server(with_permission_tool=False) as (live, _):
        async with bridge_host(live.url, tmp_path / "a.log", args=("--push", "--permission-relay")) as (client, _):
            assert PERMISSION_CAPABILITY not in (client.server_capabilities.experimental or {})
    async with fleet_server(with_permission_tool=True) as (live, _):
        async with bridge_host(live.url, tmp_path / "b.log", args=("--push",)) as (client, _):
            assert PERMISSION_CAPABILITY not in (client.server_capabilities.experimental or {})
        async with bridge_host(live.url, tmp_path / "c.log", args=("--push", "--permission-relay")) as (client, _):
            assert PERMISSION_CAPABILITY in (client.server_capabilities.experimental or {})


async def test_permission_request_goes_to_the_fleet_and_verdicts_come_back_once_per_request(tmp_path: Path) -> None:
    request = {"request_id": "abcde", "tool_name": "Bash", "description": "Run tests", "input_preview": "make test"}
    async with fleet_server(with_permission_tool=True) as (live, desk):
        async with bridge_host(live.url, tmp_path / "bridge.log", args=("--push", "--permission-relay")) as (
            client, received,
        ):
            await client.session.send_notification(
                _Notification(method="notifications/claude/channel/permission_request", params=request)  # type: ignore[arg-type]
            )
            await eventually(lambda: desk.requests, "request_permission called on the fleet")
            assert [r.model_dump() for r in desk.requests] == [request]

            target = await _bridge_target(live)
            verdicts = [{"request_id": "abcde", "behavior": "allow"}, {"request_id": "abcde", "behavior": "allow"},
                        {"request_id": "fghij", "behavior": "deny"}]
            for verdict in verdicts:
                await target.notifier.send_notification(
                    _Notification(method="notifications/claude/channel/permission", params=verdict)  # type: ignore[arg-type]
                )
            await eventually(lambda: len(received.verdicts) >= 2, "two verdicts on the host")
            # A channel push after the verdicts proves the repeated verdict is not merely late.
            await live.hub.dispatch([chat_message("after-verdicts")])
            await eventually(lambda: received.channel, "the push after the verdicts")
            assert received.verdicts == [verdicts[0], verdicts[2]]
