"""Team channels across a fleet (issue 37): three replica processes on Azurite and the Graph emulator
over HTTP, one inbox host (a host without channel pushes, as Codex is) calling any replica.

A person @mentions the agent in a channel and replies in the thread the agent answered: each reaches
the host once, with the team's, the channel's and the thread's names. Unmentioned chatter is not
delivered. A reply in a thread the agent started two days ago arrives. Then the replica holding the
``channel_watch`` lease is SIGKILLed; a channel added afterwards is found by the watch's next holder,
and a mention there and a reply in the first thread arrive once, nothing lost.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from channel_tenant import post_mention, with_team
from inbox_host import InboxLoop

from emulator.seed import Seed, ThrottleBudget, build_seed
from service.devstack.azurite import Azurite
from service.devstack.fleet import DEV_TOKEN
from service.domain.channel_place import channel_conversation_id
from service.domain.message import MessageKey
from service.workers import channel_watch
from tests.bridge.fleet_stack import BridgeFleet, bridge_fleet
from tests.mcp.server_fixture import eventually

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

TEAM = "7d1c0b8e-0000-4000-8000-00000000e003"
SETTLE_S = 6.0  # a second delivery through another replica's rotation would show by now
ENV = {
    "ENTRABOT_CHAT_POLL_INTERVAL_S": "1.0",
    "ENTRABOT_CHAT_POLL_JITTER_S": "0.2",
    "ENTRABOT_EMAIL_POLL_INTERVAL_S": "5.0",
    "ENTRABOT_CHANNEL_DISCOVERY_INTERVAL_S": "3",
    "ENTRABOT_CHANNEL_READS_PER_S": "4",
}


def _seed() -> Seed:
    base = build_seed(chats=1, humans=3, throttle=ThrottleBudget.relaxed(), random_seed=11)
    ada, agent = base.humans[0].id, base.agent_user.id
    messages = [
        {"from_user": agent, "content": "rollout plan v1", "created": "-2d"},
        {"from_user": ada, "content": "history, never replayed", "created": "-1h"},
    ]
    return with_team(base, TEAM, "Engineering", [{"display_name": "Ops", "messages": messages}])


async def _watched(stack: BridgeFleet, channels: int) -> None:
    deadline = time.monotonic() + 60
    while await stack.ledger.channel_cursor_count() < channels:
        assert time.monotonic() < deadline, f"{channels} channel cursors not started in 60 s"
        await asyncio.sleep(0.25)


@pytest.mark.timeout(300)
async def test_channel_messages_reach_an_inbox_host_once_across_three_replicas_and_a_kill(
    azurite: Azurite, tmp_path: Path
) -> None:
    seed = _seed()
    ada, grace = seed.humans[0], seed.humans[1]
    agent = seed.agent_user
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=3, seed=seed, env=ENV) as stack:
        emulator = stack.fleet.emulator
        assert emulator is not None
        teams = emulator.state.teams
        members = stack.fleet.members
        ops = next(c.id for c in teams.channels(TEAM, None) if c.display_name == "Ops")
        old_thread = next(m for m in teams.roots(TEAM, ops) if m.content == "rollout plan v1")
        host = InboxLoop(
            lambda: next(m for m in members if m.alive).mcp_url, DEV_TOKEN, host_id="codex"
        )
        loop = asyncio.create_task(host.run())
        try:
            await _watched(stack, 2)  # General and Ops, cursors at their newest
            await eventually(lambda: host.calls > 0, "the inbox host's first call")

            asked = post_mention(
                teams,
                TEAM,
                ops,
                sender_id=ada.id,
                agent=agent,
                text="ship 4.2",
                subject="Release 4.2",
            )
            chatter = teams.post(TEAM, ops, sender_id=grace.id, content="lunch anyone?")
            teams.post(TEAM, ops, sender_id=agent.id, content="on it", reply_to_id=asked.id)
            thanks = teams.post(TEAM, ops, sender_id=ada.id, content="thanks", reply_to_id=asked.id)
            late = teams.post(
                TEAM, ops, sender_id=grace.id, content="v2 please", reply_to_id=old_thread.id
            )
            await eventually(
                lambda: {asked.id, thanks.id, late.id} <= set(host.message_ids()),
                "the mention, the reply in the agent's thread and the reply in the old thread",
                timeout_s=60,
            )

            holder = await stack.ledger.lease(channel_watch.ROLE)
            assert holder is not None
            victim = next(m for m in members if m.name == holder.holder)
            victim.kill()
            later = teams.add_channel(TEAM, "Later")
            await _watched(stack, 3)  # the next holder found the new channel
            hello = post_mention(
                teams, TEAM, later.id, sender_id=grace.id, agent=agent, text="are you here too?"
            )
            again = teams.post(
                TEAM, ops, sender_id=ada.id, content="and 4.3?", reply_to_id=asked.id
            )
            await eventually(
                lambda: {hello.id, again.id} <= set(host.message_ids()),
                "the mention in the new channel and the reply after the kill",
                timeout_s=90,
            )
            await asyncio.sleep(SETTLE_S)
        finally:
            host.stop()
            await asyncio.wait_for(loop, 60)

        ops_id = channel_conversation_id(TEAM, ops)
        # By (conversation, message): Teams ids are milliseconds, unique only within a channel.
        counts = host.counts()
        expected = {MessageKey(ops_id, m.id) for m in (asked, thanks, late, again)}
        expected.add(MessageKey(channel_conversation_id(TEAM, later.id), hello.id))
        assert set(counts) == expected, (chatter.id, counts)
        assert all(n == 1 for n in counts.values()), counts
        by_id = {item["message_id"]: item for item in host.items if item["chat_id"] == ops_id}
        [in_later] = [item for item in host.items if item["chat_id"] != ops_id]
        for mid in (asked.id, thanks.id, again.id):
            item = by_id[mid]
            assert item["chat_id"] == ops_id and item["source"] == "teams"
            assert item["channel"] == {
                "team_id": TEAM,
                "team": "Engineering",
                "channel_id": ops,
                "channel": "Ops",
                "thread_id": asked.id,
            }
            assert "Thread: Release 4.2" in item["content"]
        assert by_id[late.id]["channel"]["thread_id"] == old_thread.id
        assert in_later["message_id"] == hello.id and in_later["channel"]["channel"] == "Later"
