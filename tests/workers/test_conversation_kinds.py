"""A third kind of conversation runs through the same seam as chats and channels: its own reader, keys
and hints, the poll, ledger, hub and hint feed of every kind (service.workers.conversation_polls).

Two replicas on one store each run a chat poll and a poll of a fake kind, "tickets", whose reader
serves messages from memory and hears only messages that @mention the agent. What each kind writes
stays under its own keys, a ticket's hint is never a chat's "not watched", the messages before its
first sight are never delivered, and each addressed message is delivered once across the replicas.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from service.delivery.claim_intents import ClaimIntents
from service.delivery.host_records import HostRecords
from service.delivery.hub import DeliveryHub, Handover, TargetKind
from service.domain.agent import AgentUser
from service.domain.conversation import TEAMS_CHATS, ConversationKind
from service.domain.message import InboundMessage, Source
from service.graph.models import ChatMessage
from service.graph.pages import Page
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.fleet.hints import Hint, HintFeed, HintLog, HintReader
from service.ledger.fleet.readers import ReaderRoster
from service.ledger.memory.interactions import InteractionLog
from service.ledger.memory.watched_chats import WatchedChats
from service.storage.local import LocalBackend
from service.telemetry.metrics import DeliveryMetrics, Metrics
from service.workers.chat_poll import ChatPoller
from service.workers.chat_state import OfferedMessage
from service.workers.conversation_polls import PollShared, conversation_poll
from service.workers.read_turns import ReadTurns
from service.workers.recorder import DeliveryRecorder

TICKETS = ConversationKind(
    name="ticket",
    source=Source.CHANNEL,  # any source a push target takes; the kind is what is tested
    cursor_prefix="ticket_cursors/",
    watched_key="watched_tickets",
    hint_tag="ticket",
)
AGENT = AgentUser("agent-oid", "agent@contoso.example", "Agent")
TICKET = "T-1"


def message(n: int, text: str, at: datetime) -> ChatMessage:
    return ChatMessage.model_validate(
        {
            "id": str(n),
            "messageType": "message",
            "createdDateTime": at.isoformat(),
            "lastModifiedDateTime": at.isoformat(),
            "from": {"user": {"id": "person-oid", "displayName": "Pat"}},
            "body": {"contentType": "text", "content": text},
        }
    )


@dataclass
class Tickets:
    """The fake kind's Graph: messages per ticket, newest last."""

    messages: dict[str, list[ChatMessage]] = field(default_factory=dict)
    reads: int = 0

    @property
    def first_sight_surfaces(self) -> bool:
        return False

    def delivers(self, message: ChatMessage) -> bool:
        return "@agent" in message.body.content

    async def newest(self, conversation_id: str) -> ChatMessage | None:
        listed = self.messages.get(conversation_id, [])
        return max(listed, key=lambda m: m.created_date_time) if listed else None

    async def changed_since(
        self, conversation_id: str, since: datetime | None, *, max_pages: int
    ) -> AsyncIterator[Page[ChatMessage]]:
        self.reads += 1
        listed = self.messages.get(conversation_id, [])
        yield Page(tuple(m for m in listed if since is None or m.modified_or_created > since), None)

    def inbound(self, message: ChatMessage, conversation_id: str) -> InboundMessage:
        return InboundMessage(
            Source.CHANNEL,
            conversation_id,
            message.id,
            "person-oid",
            "Pat",
            message.created_date_time,
            message.body.content,
        )


@dataclass
class NoChats:
    """Chats nobody writes in: the chat poll only takes its hints."""

    @property
    def first_sight_surfaces(self) -> bool:
        return True

    def delivers(self, message: ChatMessage) -> bool:
        return True

    async def newest(self, conversation_id: str) -> ChatMessage | None:
        return None

    async def changed_since(
        self, conversation_id: str, since: datetime | None, *, max_pages: int
    ) -> AsyncIterator[Page[ChatMessage]]:
        yield Page((), None)

    def inbound(self, message: ChatMessage, conversation_id: str) -> InboundMessage:
        raise AssertionError("no chat has a message")


@dataclass
class Recorder:
    target_id: str
    kind: TargetKind = TargetKind.PUSH
    received: list[InboundMessage] = field(default_factory=list)

    def is_alive(self) -> bool:
        return True

    def accepts(self, message: InboundMessage) -> bool:
        return True

    def room_for(self, message: InboundMessage, alongside: object) -> bool:
        return True

    def allotted(self, taken: object, left: object) -> None:
        """A push target takes what it is offered."""

    async def deliver(self, message: InboundMessage) -> Handover:
        self.received.append(message)
        return Handover.TAKEN


@dataclass
class Replica:
    chats: ChatPoller
    tickets: ChatPoller
    target: Recorder
    metrics: Metrics

    async def cycle(self) -> None:
        await self.chats.cycle()
        await self.tickets.cycle()


def replica(name: str, store: LocalBackend, reader: Tickets) -> Replica:
    metrics = Metrics()
    hub = DeliveryHub(DeliveryMetrics())
    target = Recorder(f"host-{name}")
    hub.register(target)
    turns = ReadTurns(ReaderRoster(store, name), spread_s=0.0, min_gap_s=0.0)
    shared = PollShared(
        hub=hub,
        intents=ClaimIntents(hub, HostRecords(store, metrics.ledger)),
        recorder=DeliveryRecorder(InteractionLog(store), name),
        agent=AGENT,
        clock=lambda: datetime.now(timezone.utc),
        hints=HintFeed(HintReader(store)),
        turns=turns,
        metrics=metrics.changes,
        first_sight_max_age=timedelta(hours=24),
        max_age=timedelta(days=7),
        concurrency=4,
    )

    def poll(kind: ConversationKind, conversations: Tickets | NoChats) -> ChatPoller:
        return conversation_poll(
            shared,
            conversations,
            ChatLedger[OfferedMessage](store, kind=kind, metrics=metrics.ledger),
            WatchedChats(store, metrics=metrics.ledger, kind=kind),
        )

    return Replica(poll(TEAMS_CHATS, NoChats()), poll(TICKETS, reader), target, metrics)


def hint_count(replica: Replica, kind: str, outcome: str) -> float:
    value = replica.metrics.changes.conversation(kind).hints.labels(outcome=outcome)._value.get()
    return float(value)


async def cycles(replicas: list[Replica], rounds: int = 3) -> None:
    for _ in range(rounds):
        for r in replicas:
            await r.cycle()


async def test_a_third_kind_is_claimed_once_under_its_own_keys_through_the_shared_poll(
    tmp_path: Path,
) -> None:
    store = LocalBackend(tmp_path / "state")
    now = datetime.now(timezone.utc)
    reader = Tickets({TICKET: [message(1, "@agent ship it", now - timedelta(minutes=5))]})
    await WatchedChats(store, metrics=Metrics().ledger, kind=TICKETS).add([TICKET])
    await WatchedChats(store, metrics=Metrics().ledger).add(["19:quiet-chat"])
    fleet = [replica("r1", store, reader), replica("r2", store, reader)]

    await cycles(fleet)  # first sight: the ticket's history is a baseline, never a delivery
    assert await store.exists(TICKETS.cursor_key(TICKET))
    assert [r.target.received for r in fleet] == [[], []]

    reader.messages[TICKET] += [
        message(2, "chatter nobody addressed to the agent", now),
        message(3, "@agent pay invoice 7", now + timedelta(seconds=1)),
    ]
    await HintLog(store).add([Hint(TICKET, now + timedelta(seconds=1), "3", kind="ticket")])
    await cycles(fleet)

    delivered = [(m.chat_id, m.message_id) for r in fleet for m in r.target.received]
    assert delivered == [(TICKET, "3")]  # once across the fleet; chatter and history never
    # Each kind's state under its own keys: the chat ledger wrote nothing for a ticket.
    assert await store.list("ticket_cursors/") == [TICKETS.cursor_key(TICKET)]
    assert not any(TICKET in key for key in await store.list(TEAMS_CHATS.cursor_prefix))
    assert (await store.read_text(TICKETS.watched_key) or "").split() == [TICKET]
    # The ticket hint went to the ticket polls only: no chat poll counted it as "not watched".
    for r in fleet:
        assert hint_count(r, "chat", "not_watched") == 0
    assert sum(hint_count(r, "ticket", "read") + hint_count(r, "ticket", "covered") for r in fleet)
    assert sum(hint_count(r, "ticket", "read") for r in fleet) >= 1


async def test_a_hint_of_a_kind_no_poll_here_runs_is_left_alone(tmp_path: Path) -> None:
    store = LocalBackend(tmp_path / "state")
    feed = HintFeed(HintReader(store))
    chats, tickets = feed.view(None), feed.view("ticket")
    await HintLog(store).add(
        [
            Hint("19:a", datetime.now(timezone.utc)),
            Hint("T-9", datetime.now(timezone.utc), kind="ticket"),
            Hint("M-1", datetime.now(timezone.utc), kind="meeting"),
        ]
    )
    assert [h.chat_id for h in await chats.poll() or []] == ["19:a"]
    assert [h.chat_id for h in await tickets.poll() or []] == ["T-9"]  # from the same read
    assert await tickets.poll() == [] and await chats.poll() == []


@pytest.mark.parametrize("kind", [TEAMS_CHATS, TICKETS])
def test_a_kind_reads_back_only_its_own_cursor_keys(kind: ConversationKind) -> None:
    key = kind.cursor_key("19:a/b c")
    assert kind.conversation_of_cursor_key(key) == "19:a/b c"
    others = [k for k in (TEAMS_CHATS, TICKETS) if k is not kind]
    assert all(o.conversation_of_cursor_key(key) is None for o in others)
