"""Delegated mode through two replicas' real parts: Ada signed in by device code, the emulator over HTTP,
one Azurite container shared by both replicas' tools, chat polls and push targets.

The agent's posts carry Ada's own identity in Graph. What is checked: a person's message (Grace's, and
Ada's own, typed by her) reaches exactly one host, Ada's as a sponsor's; the agent's prefixed posts,
whichever replica sent them, reach no host on either replica; a message of Ada's written while a send
of the agent's is in flight waits for it and is then delivered; only the agent's own posts may be
edited, on either replica; the other chats of Ada's are not watched.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sign_in_kit import new_token_key

from emulator.server import RunningEmulator
from service.domain.message import InboundMessage
from service.ledger.memory.sent_messages import parse_sent, sent_key
from service.storage.blob import BlobBackend
from service.workers.chat_wants import FAILED_RETRY_S
from tests.tools.tool_world import RecordingPushTarget, ToolWorld, tool_world

pytestmark = [pytest.mark.azurite]

CYCLES = 3  # enough for the scan to hint, both replicas to read, and the claim to settle


@dataclass
class Pair:
    a: ToolWorld
    b: ToolWorld
    hosts: tuple[RecordingPushTarget, RecordingPushTarget]

    @property
    def chat(self) -> str:
        return self.a.chat(1)  # a group chat of Ada, Grace (and the agent user, idle here)

    async def cycles(self, n: int = CYCLES) -> None:
        for _ in range(n):
            for world in (self.a, self.b):
                await (
                    world.watched.load()
                )  # as the poll does when a hint names a chat it does not watch yet
                await world.poller.cycle()

    def delivered(self) -> Counter[str]:
        return Counter(m.message_id for host in self.hosts for m in host.received)

    def received(self, message_id: str) -> InboundMessage:
        return next(m for host in self.hosts for m in host.received if m.message_id == message_id)


@pytest.fixture
async def pair(
    emu: RunningEmulator, tmp_path: Path, blob_backend: BlobBackend
) -> AsyncIterator[Pair]:
    ada = emu.seed.humans[0].user_principal_name
    key = new_token_key()  # both replicas open the one sign-in record
    async with (
        tool_world(
            emu,
            tmp_path / "a",
            signed_in=ada,
            backend=blob_backend,
            replica_id="replica-a",
            delegated_token_key=key,
        ) as a,
        tool_world(
            emu,
            tmp_path / "b",
            signed_in=ada,
            backend=blob_backend,
            replica_id="replica-b",
            delegated_token_key=key,
        ) as b,
    ):
        hosts = (
            RecordingPushTarget(target_id="push:host-a"),
            RecordingPushTarget(target_id="push:host-b"),
        )
        a.hub.register(hosts[0])
        b.hub.register(hosts[1])
        yield Pair(a, b, hosts)


async def test_a_persons_message_reaches_one_host_and_the_agents_own_posts_reach_none(
    pair: Pair,
) -> None:
    chat = pair.chat
    first = await pair.a.ok("send_teams_message", {"chat_id": chat, "text": "On it."}, push=True)
    await pair.cycles()  # first sight of the chat, at the agent's own post
    grace = await pair.a.inject(chat, "Grace", "Thanks! Can you also update the notes?")
    ada = await pair.a.inject(chat, "Ada", "Yes, and tag the release.")
    second = await pair.b.ok("send_teams_message", {"chat_id": chat, "text": "Tagged."}, push=True)
    await pair.cycles()

    posted = {m.id: m for m in pair.a.emu.state.messages(chat)}
    for reply in (first, second):
        message = posted[reply["message_id"]]
        assert (
            message.sender is not None and message.sender.user_id == pair.a.agent.object_id
        )  # Ada's identity
        assert message.content.startswith("[EntraBot] ")
    assert pair.delivered() == Counter({grace: 1, ada: 1})
    assert pair.received(ada).sender_is_sponsor and not pair.received(grace).sender_is_sponsor
    record = parse_sent(await pair.a.backend.read_text(sent_key(chat)) or "")
    assert record.ids == {first["message_id"], second["message_id"]} and record.pending == ()


async def test_the_persons_message_during_a_send_in_flight_waits_for_the_send(pair: Pair) -> None:
    chat = pair.chat
    await pair.a.ok("send_teams_message", {"chat_id": chat, "text": "Starting."}, push=True)
    await pair.cycles()
    in_flight = await pair.a.deps.sent_messages.begin(
        chat
    )  # replica a is between noting a send and posting it
    ada = await pair.a.inject(chat, "Ada", "Wait, use the other branch.")
    await pair.cycles()
    assert (
        pair.delivered() == Counter()
    )  # could be the agent's own post, not recorded yet: nobody decides
    await pair.a.deps.sent_messages.settle(chat, in_flight, None)  # it posted nothing after all
    # A read that found the send in flight decided nothing and keeps its want, read again after
    # FAILED_RETRY_S: no new hint comes for a message the scan has already hinted.
    await asyncio.sleep(FAILED_RETRY_S)
    await pair.cycles()
    assert pair.delivered() == Counter({ada: 1})


async def test_an_unrecorded_prefixed_post_of_a_replica_that_died_reaches_nobody(
    pair: Pair,
) -> None:
    chat = pair.chat
    await pair.a.ok("send_teams_message", {"chat_id": chat, "text": "Starting."}, push=True)
    await pair.cycles()
    # Posted under Ada's identity by a replica that died before recording it: only its prefix tells.
    orphan = await pair.a.inject(chat, "Ada", "[EntraBot] Half-way through the migration.")
    ada = await pair.a.inject(chat, "Ada", "How far along are you?")
    await pair.cycles()
    assert pair.delivered() == Counter({ada: 1}) and orphan not in pair.delivered()


async def test_either_replica_edits_the_agents_posts_and_neither_edits_the_persons_own(
    pair: Pair,
) -> None:
    chat = pair.chat
    sent = await pair.a.ok("send_teams_message", {"chat_id": chat, "text": "Draft."}, push=True)
    edited = await pair.b.ok(
        "edit_teams_message", {"chat_id": chat, "message_id": sent["message_id"], "text": "Final."}
    )
    assert edited["state"] == "edited"
    assert {m.id: m.content for m in pair.a.emu.state.messages(chat)}[
        sent["message_id"]
    ] == "[EntraBot] Final."
    own = await pair.a.inject(chat, "Ada", "My own words.")
    refused = await pair.b.error(
        "edit_teams_message", {"chat_id": chat, "message_id": own, "text": "Not yours."}
    )
    assert "not posted by the agent" in refused


async def test_the_read_tool_marks_only_the_agents_posts_as_its_own(pair: Pair) -> None:
    chat = pair.chat
    sent = await pair.a.ok("send_teams_message", {"chat_id": chat, "text": "Hello."}, push=True)
    own = await pair.a.inject(chat, "Ada", "Hello yourself.")
    read = await pair.b.ok("read_teams_messages", {"chat_id": chat})
    marks = {m["message_id"]: m["from_agent"] for m in read["messages"]}
    assert marks == {sent["message_id"]: True, own: False}


async def test_the_signed_in_persons_other_chats_are_not_watched(pair: Pair) -> None:
    await pair.cycles()
    await pair.a.discovery.cycle()
    assert (
        pair.a.watched.chats == frozenset()
    )  # none from /me/chats: only chats the agent writes in
    await pair.a.ok("send_teams_message", {"chat_id": pair.chat, "text": "Hi."}, push=True)
    await pair.cycles()
    assert pair.b.watched.chats == frozenset({pair.chat})
