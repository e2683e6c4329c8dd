"""The bridge against real replica processes: Graph messages arrive on its stdout; it survives failover.

Its host is the MCP Python SDK's stdio client, and for delivery also the TypeScript SDK's.

Two replicas behind a loopback balancer that keeps a host on one replica while it lives (as an ingress
hashing the affinity header does). SIGKILL of the replica holding the bridge's session while humans
post: the bridge initializes a new session on the other, pushes continue, nothing is emitted twice,
and nothing is lost, not even the claims in flight at the kill (the bridge acknowledges what it wrote,
and the surviving replica pushes what its host is still owed). SIGTERM of the replica then holding the
session: nothing is lost either.
"""

from __future__ import annotations

import asyncio
import json
import random
from datetime import timedelta
from pathlib import Path

import pytest

from service.clock import parse_timestamp, utc_now
from service.devstack.azurite import Azurite
from service.devstack.delivery_account import KillRecord, SentMessage, account_deliveries
from service.devstack.fleet import DEV_TOKEN
from service.mcp.sdk_adapter import CHANNEL_CAPABILITY
from tests.bridge.bridge_host import Received, bridge_host
from tests.bridge.fleet_stack import (
    READY_TIMEOUT_S,
    BridgeFleet,
    assert_enveloped_push,
    bridge_fleet,
)
from tests.bridge.ts_stdio_host import typescript_stdio_host
from tests.mcp.server_fixture import eventually
from tests.mcp.test_mcp_ts_client import _read_event, ts_client_dir  # noqa: F401 - a fixture, used by name

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

IN_FLIGHT_WINDOW = timedelta(seconds=15)
DELIVERY_WAIT_S = 60.0


def _sessions_opened(log: Path) -> int:
    opened = [
        json.loads(line)
        for line in log.read_text().splitlines()
        if '"fleet session opened"' in line
    ]
    return int(opened[-1]["sessions_opened"]) if opened else 0


def _keys(received: Received) -> list[tuple[str, str]]:
    return [(str(p["meta"]["chat_id"]), str(p["meta"]["message_id"])) for p in received.channel]


async def _post(
    stack: BridgeFleet, count: int, interval_s: float, sent: list[SentMessage], tag: str
) -> None:
    rng = random.Random(tag)
    chats = stack.chats()
    for i in range(count):
        chat_id, members = rng.choice(chats)
        sender = stack.seed.find_user(rng.choice(members))
        assert sender is not None
        posted = await stack.traffic.post_chat(sender, chat_id, f"{tag} message {i}")
        sent.append(SentMessage(posted.chat_id, posted.message_id, parse_timestamp(posted.created)))
        await asyncio.sleep(interval_s)


async def _all_explained(
    received: Received, sent: list[SentMessage], kills: list[KillRecord]
) -> None:
    """Wait (bounded) until every posted message arrived or is a claim the SIGKILL took with it."""
    await eventually(
        lambda: (
            not account_deliveries(
                sent, _keys(received), kills, in_flight_window=IN_FLIGHT_WINDOW
            ).unexplained
        ),
        "every posted message on the bridge's stdout",
        timeout_s=DELIVERY_WAIT_S,
    )


@pytest.mark.timeout(300)
async def test_a_human_message_in_graph_arrives_on_stdout_inside_its_xpia_envelope(
    azurite: Azurite, tmp_path: Path
) -> None:
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=1, chats=2) as stack:
        async with bridge_host(stack.balancer.url(), tmp_path / "bridge.log", token=DEV_TOKEN) as (
            client,
            received,
        ):
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"send_teams_message", "list_watched_chats"} <= tools, tools
            await stack.wait_bootstrapped()

            posted = await stack.post_forged_human_message()

            await eventually(
                lambda: received.channel,
                "the push on the bridge's stdout",
                timeout_s=DELIVERY_WAIT_S,
            )
            [push] = received.channel
            assert_enveloped_push(push, posted)

            # A tool call through the bridge reaches the same replica's tools.
            listed = await client.call_tool("list_watched_chats", {})
            assert not listed.is_error, listed.content
            assert posted.chat_id in json.dumps(listed.model_dump(mode="json"))


@pytest.mark.timeout(300)
async def test_a_human_message_in_graph_reaches_a_typescript_stdio_host_inside_its_xpia_envelope(
    azurite: Azurite,
    ts_client_dir: Path,
    tmp_path: Path,  # noqa: F811 - the fixture imported above
) -> None:
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=1, chats=2) as stack:
        async with typescript_stdio_host(
            ts_client_dir,
            stack.balancer.url(),
            tmp_path / "bridge.log",
            token=DEV_TOKEN,
            pushes=1,
            # The host waits for its push through bootstrap and delivery; the test's own bound is the timeout.
            wait_s=READY_TIMEOUT_S + DELIVERY_WAIT_S,
            tool="list_watched_chats",
            tool_args={},
        ) as process:
            assert process.stdout is not None
            ready = await asyncio.wait_for(_read_event(process.stdout, "ready"), DELIVERY_WAIT_S)
            assert {"send_teams_message", "list_watched_chats"} <= set(ready["tools"]), ready[
                "tools"
            ]
            # The call went through the bridge to the replica's tool (its list may still be empty: the
            # host called it at once, perhaps before the replica's first discovery sweep).
            assert isinstance(ready["called"], dict) and isinstance(
                ready["called"].get("chats"), list
            ), ready
            assert CHANNEL_CAPABILITY in ready["experimental"]
            await stack.wait_bootstrapped()

            posted = await stack.post_forged_human_message()

            done = await asyncio.wait_for(
                _read_event(process.stdout, "done"), DELIVERY_WAIT_S + READY_TIMEOUT_S
            )
            [push] = done["pushes"]
            assert_enveloped_push(push, posted)
            assert await asyncio.wait_for(process.wait(), DELIVERY_WAIT_S) == 0


@pytest.mark.timeout(420)
async def test_bridge_fails_over_on_sigkill_without_duplicates_and_loses_nothing_on_sigterm(
    azurite: Azurite, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=2, chats=4) as stack:
        first, second = stack.fleet.members
        async with bridge_host(stack.balancer.url(), log, token=DEV_TOKEN) as (_, received):
            await stack.wait_bootstrapped()
            assert set(stack.balancer.routed) == {first.port}, (
                "the bridge's session is on the first replica"
            )
            await eventually(lambda: _sessions_opened(log) == 1, "the bridge's first session")

            # Phase 1: SIGKILL the replica holding the session while humans post.
            sent_kill: list[SentMessage] = []
            posting = asyncio.create_task(_post(stack, 40, 0.15, sent_kill, "kill"))
            await eventually(lambda: len(sent_kill) >= 15, "traffic before the kill", timeout_s=60)
            first.kill()
            killed_at = utc_now()
            await posting
            await eventually(
                lambda: _sessions_opened(log) >= 2,
                "a new session on the surviving replica",
                timeout_s=DELIVERY_WAIT_S,
            )
            assert second.port in stack.balancer.routed, (
                "the new session went to the surviving replica"
            )
            await _all_explained(
                received, sent_kill, []
            )  # no lost-at-SIGKILL allowance: acknowledged delivery
            account = account_deliveries(
                sent_kill, _keys(received), [], in_flight_window=IN_FLIGHT_WINDOW
            )
            in_window = sum(
                1 for m in sent_kill if timedelta(0) <= killed_at - m.created <= IN_FLIGHT_WINDOW
            )
            print(
                f"\nSIGKILL of {first.name}: sent {account.sent}, delivered {account.delivered} "
                f"({in_window} sent within {IN_FLIGHT_WINDOW.seconds} s before the kill), "
                f"duplicates {len(account.duplicates)}"
            )
            assert not account.duplicates and not account.unexpected and not account.lost_at_sigkill
            assert not account.unexplained, account.unexplained
            after_kill = [m.key for m in sent_kill if m.created > killed_at]
            assert after_kill and set(after_kill) <= set(_keys(received)), (
                "pushes continued after the kill"
            )

            # Phase 2: bring the first back, SIGTERM the one now holding the session: nothing lost.
            first.start()
            await asyncio.to_thread(first.wait_ready)
            sessions_before = _sessions_opened(log)
            sent_term: list[SentMessage] = []
            posting = asyncio.create_task(_post(stack, 30, 0.15, sent_term, "term"))
            await eventually(
                lambda: len(sent_term) >= 10, "traffic before the SIGTERM", timeout_s=60
            )
            await asyncio.to_thread(second.terminate)
            await posting
            await eventually(
                lambda: _sessions_opened(log) > sessions_before,
                "a session on the restarted replica",
                timeout_s=DELIVERY_WAIT_S,
            )
            await _all_explained(received, sent_term, [])
            everything = sent_kill + sent_term
            final = account_deliveries(
                everything, _keys(received), [], in_flight_window=IN_FLIGHT_WINDOW
            )
            print(
                f"SIGTERM of {second.name}: sent {len(sent_term)}, all delivered; "
                f"whole run duplicates {len(final.duplicates)}"
            )
            assert not final.duplicates and not final.unexplained and not final.unexpected


@pytest.mark.timeout(300)
async def test_a_send_through_a_tools_only_bridge_is_never_reported_failed_by_the_bridges_timeout(
    azurite: Azurite, tmp_path: Path
) -> None:
    """Claude Code through a tools-only bridge: send_teams_message with wait_for_reply omitted waits for a
    sponsor (the host takes no pushes). The wait must end inside the bridge's request timeout with
    "posted, no reply yet", never as `Request 'tools/call' timed out` for a message that is in the chat."""
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=1, chats=2) as stack:
        args = ("--request-timeout", "8")  # tools only: no --push
        async with bridge_host(
            stack.balancer.url(), tmp_path / "bridge.log", token=DEV_TOKEN, args=args
        ) as (
            client,
            _,
        ):
            chat_id, _members = stack.chats()[0]
            result = await client.call_tool(
                "send_teams_message", {"chat_id": chat_id, "text": "Release is out."}
            )
            assert not result.is_error, result.content
            assert result.structured_content is not None
            out = result.structured_content
            assert out["wait"] == "timeout" and out["wait_timeout_s"] <= 8
            assert "do not send it again" in out["_next_action"]
            assert stack.fleet.emulator is not None
            assert out["message_id"] in [m.id for m in stack.fleet.emulator.state.messages(chat_id)]
