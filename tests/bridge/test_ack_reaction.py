"""The acknowledgement reaction through the real parts (issue 22 item 4): a replica process on Azurite and
the Graph emulator, and the channel bridge as the host.

With ``ENTRABOT_DELIVERY_ACK_REACTION`` set, a person's message reaches the bridge's host, is acknowledged,
and the emulator shows exactly one reaction of that type by the agent user on it. That reaction moves the
message's lastModifiedDateTime; the fleet reads the chat again after it (for the person's next message) and
neither delivers the first message again nor reacts again. A bridge run with ``--no-acknowledge`` (a push
host that names no host identity, so at most once and never acknowledged) gets no reaction. With the setting off (the default) the replica has no reaction loop and sets none.

One fleet for all of it: the replica is restarted once, without the setting, for the last part.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.bridge.config import HOST_ID_ENV
from service.delivery.host_record import parse_host_record, record_key
from service.devstack.azurite import Azurite
from service.devstack.fleet import DEV_TOKEN, ReplicaProcess
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics
from tests.bridge.bridge_host import bridge_host
from tests.bridge.fleet_stack import BridgeFleet, bridge_fleet
from tests.mcp.server_fixture import eventually

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

REACTION = "👀"
SETTING = "ENTRABOT_DELIVERY_ACK_REACTION"
SET_REACTION = "POST /v1.0/chats/{id}/messages/{id}/setReaction"
# How long a reaction that should not come is given to come anyway: an acknowledgement's reaction is queued
# as its write returns and set at once (well under a second here). Not a timing assertion: only a window.
SETTLE_S = 4.0


async def _samples(replica: ReplicaProcess, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{replica.base_url}/metrics")).text
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


class Chat:
    """One chat of the agent's, a person in it, and the agent user's reactions to its messages."""

    def __init__(self, stack: BridgeFleet) -> None:
        assert stack.fleet.emulator is not None
        self.stack, self.emulator = stack, stack.fleet.emulator
        self.chat_id, members = stack.chats()[0]
        person = stack.seed.find_user(members[0])
        assert person is not None
        self.person = person

    async def post(self, text: str) -> str:
        return (await self.stack.traffic.post_chat(self.person, self.chat_id, text)).message_id

    def agent_reactions(self, message_id: str) -> list[str]:
        message = next(m for m in self.emulator.state.messages(self.chat_id) if m.id == message_id)
        return [
            r.reaction_type for r in message.reactions if r.user_id == self.stack.seed.agent_user.id
        ]

    def listed_after_reacting(self, message_id: str) -> bool:
        """Whether the fleet listed the chat's messages after the agent reacted to ``message_id``."""
        recent = self.emulator.stats.recent()
        reacted = max(
            i
            for i, r in enumerate(recent)
            if r.route == SET_REACTION.split(" ", 1)[1] and message_id in r.path
        )
        return any(
            r.method == "GET" and r.route == "/v1.0/chats/{id}/messages" and self.chat_id in r.path
            for r in recent[reacted + 1 :]
        )


@pytest.mark.timeout(300)
async def test_an_acknowledged_chat_message_gets_one_agent_reaction_and_nothing_else_does(
    azurite: Azurite, tmp_path: Path
) -> None:
    env = {
        "ENTRABOT_CHAT_POLL_INTERVAL_S": "1.0",
        "ENTRABOT_CHAT_POLL_JITTER_S": "0.2",
        "ENTRABOT_EMAIL_POLL_INTERVAL_S": "5.0",
        SETTING: REACTION,
    }
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=1, chats=2, env=env) as stack:
        replica, chat = stack.fleet.members[0], Chat(stack)
        backend = BlobBackend.from_connection_string(
            azurite.connection_string, stack.fleet.container, metrics=StorageMetrics()
        )

        async def record_of(host: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
            record = parse_host_record(await backend.read_text(record_key(host)) or "{}")
            return [e.key for e in record.pending], list(record.acked)

        # On, and the host acknowledges: one reaction each, and the reaction brings nothing back.
        async with bridge_host(
            stack.balancer.url(),
            tmp_path / "bridge.log",
            token=DEV_TOKEN,
            env={HOST_ID_ENV: "acknowledges"},
        ) as (_, received):
            await stack.wait_bootstrapped()
            first = await chat.post("ship it")
            await eventually(
                lambda: chat.agent_reactions(first) == [REACTION],
                "the agent's reaction",
                timeout_s=60,
            )
            second = await chat.post("and this one")
            await eventually(
                lambda: chat.agent_reactions(second) == [REACTION],
                "the reaction to the next message",
                timeout_s=60,
            )
            assert chat.listed_after_reacting(first), (
                "the fleet read the chat after the first reaction"
            )
            assert received.message_ids() == [first, second]
            assert chat.agent_reactions(first) == [REACTION], "reacted to once"
            assert await record_of("acknowledges") == (
                [],
                [(chat.chat_id, first), (chat.chat_id, second)],
            )
            claimed = await _samples(replica, "entrabot_deliveries_total")
            assert (
                sum(v for labels, v in claimed.items() if ("outcome", "pushed") in labels) == 2
            ), "claimed and pushed once each: no edit taken for a new message"
            assert await _samples(replica, "entrabot_ack_reactions_total") == {
                (("outcome", "set"),): 2
            }

        # On, but the host does not acknowledge (it names no host, so nothing is owed to it): never reacted to.
        async with bridge_host(
            stack.balancer.url(),
            tmp_path / "bridge-silent.log",
            token=DEV_TOKEN,
            args=("--push", "--no-acknowledge"),
            env={HOST_ID_ENV: "silent"},
        ) as (_, silent):
            third = await chat.post("are you there")
            await eventually(
                lambda: third in silent.message_ids(), "the push to the silent host", timeout_s=60
            )
            await asyncio.sleep(SETTLE_S)
            assert chat.agent_reactions(third) == []
            assert await backend.read_text(record_key("silent")) is None, (
                "no record: nothing acknowledged"
            )

        # Off (the default): no reaction loop, no reaction.
        await asyncio.to_thread(replica.terminate)
        del replica.env[SETTING]
        replica.start()
        await asyncio.to_thread(replica.wait_ready)
        async with bridge_host(
            stack.balancer.url(),
            tmp_path / "bridge-off.log",
            token=DEV_TOKEN,
            env={HOST_ID_ENV: "acknowledges-off"},
        ) as (_, received_off):
            fourth = await chat.post("no reaction please")
            await eventually(
                lambda: fourth in received_off.message_ids(),
                "the push with the setting off",
                timeout_s=60,
            )

            async def acknowledged() -> bool:
                return (chat.chat_id, fourth) in (await record_of("acknowledges-off"))[1]

            await eventually(acknowledged, "the acknowledgement in the record", timeout_s=30)
            await asyncio.sleep(SETTLE_S)
            assert chat.agent_reactions(fourth) == []
            async with httpx.AsyncClient(timeout=10) as http:
                loops = (await http.get(f"{replica.base_url}/readyz")).json()["loops"]
            assert "ack_reactions" not in loops and "host_deliveries" in loops
            assert chat.emulator.stats.count(SET_REACTION) == 2
        await backend.aclose()
