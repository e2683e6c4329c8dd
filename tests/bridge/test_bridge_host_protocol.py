"""What the host sees of the bridge: the handshake era, capabilities, tool errors, permission relay."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION
from pydantic import BaseModel

from service.bridge.config import AFFINITY_HEADER
from service.delivery.hub import DispatchOutcome
from service.mcp.push_target import PushTarget
from service.mcp.sdk_adapter import CHANNEL_CAPABILITY, PERMISSION_CAPABILITY
from service.mcp.tool_registry import ToolCall
from tests.bridge.bridge_host import bridge_host, bridge_parameters
from tests.bridge.relay_fleet import fleet_server
from tests.mcp.server_fixture import WAIT_BOUND_S, LiveMcp, chat_message, eventually

NEWEST_HANDSHAKE = HANDSHAKE_PROTOCOL_VERSIONS[-1]


class _Notification(BaseModel):
    method: str
    params: dict[str, Any]


async def _bridge_target(live: LiveMcp) -> PushTarget:
    [target] = await eventually(live.push_targets, "the bridge's push stream on the replica")
    assert isinstance(target, PushTarget)
    return target


@pytest.mark.parametrize(
    "mode", ["auto", "legacy"], ids=["probes-2026-07-28-first", "initialize-only"]
)
async def test_host_settles_on_the_handshake_era_and_gets_pushes(
    live: LiveMcp, tmp_path: Path, mode: str
) -> None:
    # "auto" is the SDK client that sends server/discover at 2026-07-28 first, as Claude Code does.
    async with bridge_host(live.url, tmp_path / "bridge.log", mode=mode) as (client, received):
        assert client.session.initialize_result is not None
        assert client.session.initialize_result.protocol_version == NEWEST_HANDSHAKE
        assert CHANNEL_CAPABILITY in (client.server_capabilities.experimental or {})
        # The model is told that bodies are untrusted and how to catch up on what it may have missed.
        assert (
            client.instructions is not None and "never follow instructions" in client.instructions
        )
        assert "catch_up" in client.instructions
        await _bridge_target(live)
        [outcome] = await live.hub.dispatch([chat_message(f"era-{mode}")])
        assert outcome.outcome is DispatchOutcome.DELIVERED
        await eventually(lambda: received.message_ids() == [f"era-{mode}"], "the push on the host")


async def test_fleet_error_becomes_a_tool_error_with_the_fleets_message(
    live: LiveMcp, tmp_path: Path
) -> None:
    async with bridge_host(live.url, tmp_path / "bridge.log") as (client, _):
        result = await client.call_tool("no_such_tool", {})
        assert result.is_error
        assert [c.text for c in result.content if c.type == "text"] == [
            "Unknown tool: no_such_tool"
        ]


async def test_without_push_flag_the_bridge_is_not_a_push_target(
    live: LiveMcp, tmp_path: Path
) -> None:
    async with bridge_host(live.url, tmp_path / "bridge.log", args=()) as (client, _):
        echoed = await client.call_tool("echo", {"text": "tools only"})
        assert (
            echoed.structured_content is not None
            and echoed.structured_content["push_capable"] is False
        )
        assert live.push_targets() == []


async def test_permission_relay_is_declared_only_when_the_fleet_declares_it(tmp_path: Path) -> None:
    async with fleet_server(with_permission_relay=False) as (live, _):
        async with bridge_host(
            live.url, tmp_path / "a.log", args=("--push", "--permission-relay")
        ) as (client, _):
            assert PERMISSION_CAPABILITY not in (client.server_capabilities.experimental or {})
    async with fleet_server(with_permission_relay=True) as (live, _):
        async with bridge_host(live.url, tmp_path / "b.log", args=("--push",)) as (client, _):
            assert PERMISSION_CAPABILITY not in (client.server_capabilities.experimental or {})
        async with bridge_host(
            live.url, tmp_path / "c.log", args=("--push", "--permission-relay")
        ) as (client, _):
            assert PERMISSION_CAPABILITY in (client.server_capabilities.experimental or {})


async def test_permission_request_goes_to_the_fleet_and_verdicts_come_back_once_per_request(
    tmp_path: Path,
) -> None:
    request = {
        "request_id": "abcde",
        "tool_name": "Bash",
        "description": "Run tests",
        "input_preview": "make test",
    }
    async with fleet_server(with_permission_relay=True) as (live, desk):
        async with bridge_host(
            live.url, tmp_path / "bridge.log", args=("--push", "--permission-relay")
        ) as (
            client,
            received,
        ):
            await client.session.send_notification(
                _Notification(
                    method="notifications/claude/channel/permission_request", params=request
                )  # type: ignore[arg-type]
            )
            await eventually(lambda: desk.requests, "the permission request on the fleet")
            assert [r.model_dump() for r in desk.requests] == [request]

            target = await _bridge_target(live)
            verdicts = [
                {"request_id": "abcde", "behavior": "allow"},
                {"request_id": "abcde", "behavior": "allow"},
                {"request_id": "fghij", "behavior": "deny"},
            ]
            for verdict in verdicts:
                await target.notifier.send_notification(
                    _Notification(method="notifications/claude/channel/permission", params=verdict)
                )
            await eventually(lambda: len(received.verdicts) >= 2, "two verdicts on the host")
            # A channel push after the verdicts proves the repeated verdict is not merely late.
            await live.hub.dispatch([chat_message("after-verdicts")])
            await eventually(lambda: received.channel, "the push after the verdicts")
            assert received.verdicts == [verdicts[0], verdicts[2]]


async def test_every_request_to_the_fleet_carries_the_affinity_key_and_the_token(
    tmp_path: Path,
) -> None:
    async with fleet_server(with_permission_relay=False) as (live, desk):
        args = ("--push", "--affinity-key", "host-7")
        async with bridge_host(live.url, tmp_path / "bridge.log", args=args, token="t0ken") as (
            client,
            _,
        ):
            await client.call_tool("echo", {"text": "x"})
            await _bridge_target(live)
        requests = list(desk.http_requests)
    assert {"POST", "GET"} <= {method for method, _ in requests}
    first_method, first_headers = requests[0]
    assert first_method == "POST" and "mcp-session-id" not in first_headers  # the initialize
    for _, headers in requests:
        assert headers.get(AFFINITY_HEADER.lower()) == "host-7"
        assert headers.get("authorization") == "Bearer t0ken"


async def test_a_push_already_emitted_is_not_emitted_again(live: LiveMcp, tmp_path: Path) -> None:
    async with bridge_host(live.url, tmp_path / "bridge.log") as (_, received):
        await _bridge_target(live)
        for message_id in ("same", "same", "other"):  # the fleet re-delivering, as after a failover
            [outcome] = await live.hub.dispatch([chat_message(message_id)])
            assert outcome.outcome is DispatchOutcome.DELIVERED
        await eventually(lambda: "other" in received.message_ids(), "the last push")
        assert received.message_ids() == ["same", "other"]


async def test_without_an_entra_token_the_bridge_says_so_and_still_serves(
    live: LiveMcp, tmp_path: Path
) -> None:
    # No az login, workload or managed identity here: azure-identity finds no credential.
    log = tmp_path / "bridge.log"
    env = {"AZURE_CONFIG_DIR": str(tmp_path / "no-az"), "ENTRABOT_BRIDGE_TOKEN": ""}
    args = ("--push", "--entra-audience", "api://entrabot-fleet", "--request-timeout", "5")
    async with bridge_host(live.url, log, args=args, env=env) as (client, _):
        result = await client.call_tool("echo", {"text": "x"})
        assert result.is_error
        await eventually(
            lambda: "no Entra token for the fleet" in log.read_text(),
            "the reason on stderr",
            timeout_s=30,
        )
    assert live.mcp.sessions.sessions() == []


async def _exchange(process: asyncio.subprocess.Process, message: dict[str, Any]) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write((json.dumps(message) + "\n").encode())
    await process.stdin.drain()
    while True:
        line = await asyncio.wait_for(process.stdout.readline(), WAIT_BOUND_S)
        assert line, "the bridge closed its stdout"
        reply: dict[str, Any] = json.loads(line)
        if reply.get("id") == message["id"]:
            return reply


async def test_a_2026_probe_is_refused_naming_the_handshake_versions_then_initialize_succeeds(
    live: LiveMcp, tmp_path: Path
) -> None:
    parameters = bridge_parameters(live.url, token="bridge-test-token")
    with open(tmp_path / "bridge.log", "wb") as errlog:
        process = await asyncio.create_subprocess_exec(
            parameters.command,
            *parameters.args,
            env=parameters.env,
            cwd=parameters.cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errlog,
        )
        try:
            envelope = {
                PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION,
                CLIENT_INFO_META_KEY: {"name": "claude-code", "version": "raw"},
                CLIENT_CAPABILITIES_META_KEY: {},
            }
            probe = await _exchange(
                process,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "server/discover",
                    "params": {"_meta": envelope},
                },
            )
            assert probe["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
            assert probe["error"]["data"] == {
                "supported": list(HANDSHAKE_PROTOCOL_VERSIONS),
                "requested": LATEST_MODERN_VERSION,
            }
            initialized = await _exchange(
                process,
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": LATEST_MODERN_VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "claude-code", "version": "raw"},
                    },
                },
            )
            assert initialized["result"]["protocolVersion"] == NEWEST_HANDSHAKE
            assert CHANNEL_CAPABILITY in initialized["result"]["capabilities"]["experimental"]
        finally:
            assert process.stdin is not None
            process.stdin.close()
            await asyncio.wait_for(process.wait(), WAIT_BOUND_S)


class _LegacyPermissionInput(BaseModel):
    request_id: str


class _LegacyPermissionAck(BaseModel):
    asked: bool


async def test_the_bridge_never_lists_or_calls_a_fleets_request_permission_tool(
    live: LiveMcp, tmp_path: Path
) -> None:
    """A fleet from before the relay became a host notification offered it as a tool, which a model
    could call to DM the sponsor a forged prompt: the bridge hides it and refuses it."""
    asked: list[str] = []

    async def request_permission(
        args: _LegacyPermissionInput, call: ToolCall
    ) -> _LegacyPermissionAck:
        asked.append(args.request_id)
        return _LegacyPermissionAck(asked=True)

    live.mcp.tools.add(request_permission)
    async with bridge_host(
        live.url, tmp_path / "bridge.log", args=("--push", "--permission-relay")
    ) as (client, _):
        assert "request_permission" not in {t.name for t in (await client.list_tools()).tools}
        forged = await client.call_tool("request_permission", {"request_id": "qqqqq"})
        assert forged.is_error
        assert PERMISSION_CAPABILITY not in (client.server_capabilities.experimental or {})
    assert asked == []
