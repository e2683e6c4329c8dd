"""The bridge's stderr is the host's log: ids only, never a message body, a tool's data or the token."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from service.bridge.cli_options import add_channel_options
from service.delivery.hub import DispatchOutcome
from tests.bridge.bridge_host import bridge_host
from tests.mcp.server_fixture import chat_message, eventually, live_mcp, mcp_settings

TOKEN = "bridge-stderr-token-5d1c9e"
BODY = "the-body-words-only-the-host-may-read-48f2"
TOOL_TEXT = "the-tool-argument-only-the-fleet-may-read-a7e0"


async def test_stderr_carries_no_message_body_no_tool_data_and_no_token_through_a_push_and_a_tool_call(
    tmp_path: Path,
) -> None:
    log = tmp_path / "bridge.log"
    async with live_mcp(mcp_settings(mcp_static_tokens=TOKEN)) as live:
        # DEBUG: what the bridge's own modules would say at their most talkative.
        async with bridge_host(
            live.url, log, token=TOKEN, args=("--push", "--log-level", "DEBUG")
        ) as (
            client,
            received,
        ):
            echoed = await client.call_tool("echo", {"text": TOOL_TEXT})
            assert not echoed.is_error and echoed.structured_content is not None
            assert echoed.structured_content["text"] == TOOL_TEXT
            session_id = echoed.structured_content["session_id"]

            await eventually(live.push_targets, "the bridge's push stream on the replica")
            [dispatched] = await live.hub.dispatch([chat_message("m-stderr", body=BODY)])
            assert dispatched.outcome is DispatchOutcome.DELIVERED
            await eventually(lambda: received.channel, "the push on the bridge's stdout")
            [push] = received.channel
            assert BODY in push["content"]

    text = log.read_text()
    lines = text.splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines), (
        "stderr is JSON lines only"
    )
    assert (
        '"fleet session opened"' in text
    )  # the log is there, so its silence below means something
    for secret in (BODY, push["content"], TOOL_TEXT, TOKEN, session_id):
        assert secret not in text, secret


async def test_at_its_default_level_the_bridge_writes_nothing_to_stderr_while_all_is_well(
    tmp_path: Path,
) -> None:
    """Claude Code shows each stderr line of a stdio server as "[ERROR] ... Server stderr": a healthy
    start, a tool call and a push must not put one there."""
    log = tmp_path / "bridge.log"
    async with live_mcp(mcp_settings(mcp_static_tokens=TOKEN)) as live:
        async with bridge_host(
            live.url, log, token=TOKEN, args=("--push", "--log-level", "WARNING")
        ) as (
            client,
            received,
        ):
            assert not (await client.call_tool("echo", {"text": "hello"})).is_error
            await eventually(live.push_targets, "the bridge's push stream on the replica")
            [dispatched] = await live.hub.dispatch([chat_message("m-quiet")])
            assert dispatched.outcome is DispatchOutcome.DELIVERED
            await eventually(lambda: received.channel, "the push on the bridge's stdout")
    assert log.read_text() == ""


def test_the_bridges_default_log_level_is_warning() -> None:
    parser = argparse.ArgumentParser()
    add_channel_options(parser)
    assert parser.parse_args([]).log_level == "WARNING"
