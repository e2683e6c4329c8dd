"""One poll per kind of conversation, all from the same parts: the seam a kind plugs into.

A replica runs one ChatPoller per kind (service.domain.conversation): Teams chats, team channels, and
whatever comes next. They share one hub, one claim-intent writer, one feed of hints, one turn among the
fleet's readers and one supervisor; each has its own ledger and watched list (the kind's keys), its
own reader (the kind's Graph routes and rules) and its own book of wants. Nothing here knows a kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from service.clock import Clock
from service.delivery.claim_intents import ClaimIntents
from service.delivery.hub import DeliveryHub
from service.domain.agent import AgentUser
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.fleet.hints import HintFeed
from service.ledger.memory.permission_requests import PermissionRequests
from service.ledger.memory.sent_messages import SentMessages
from service.ledger.memory.watched_chats import WatchedChats
from service.telemetry.metrics import ChangeMetrics
from service.workers.chat_book import ChatBook
from service.workers.chat_claiming import ChatClaimer
from service.workers.chat_poll import ChatPoller
from service.workers.chat_reading import ChatReader
from service.workers.chat_state import OfferedMessage
from service.workers.chat_wants import FleetRole
from service.workers.conversation_reader import ConversationReader
from service.workers.read_turns import ReadTurns
from service.workers.recorder import DeliveryRecorder


@dataclass(frozen=True)
class PollShared:
    """What every kind's poll on one replica shares."""

    hub: DeliveryHub
    intents: ClaimIntents
    recorder: DeliveryRecorder
    agent: AgentUser
    clock: Clock
    hints: HintFeed
    turns: ReadTurns
    metrics: ChangeMetrics
    first_sight_max_age: timedelta  # Settings.first_sight_max_age_h
    max_age: timedelta  # Settings.chat_max_age_h
    concurrency: int
    sent: SentMessages | None = None  # delegated mode: the agent's sends, told from the person's


def conversation_poll(
    shared: PollShared,
    conversations: ConversationReader,
    ledger: ChatLedger[OfferedMessage],
    watched: WatchedChats,
    *,
    permissions: PermissionRequests | None = None,
    roles: Sequence[FleetRole] = (),
    on_notification_hint: Callable[[], None] | None = None,
    book: ChatBook | None = None,
) -> ChatPoller:
    """The poll of the ledger's kind. ``permissions``: where a sponsor's verdict on a permission
    request may come from (chats only); ``roles``: the fleet roles whose turn comes with this loop."""
    if watched.kind != ledger.kind:
        raise ValueError(f"a {ledger.kind.name} poll was given the {watched.kind.name} list")
    return ChatPoller(
        reader=ChatReader(
            conversations,
            ledger,
            shared.agent,
            shared.clock,
            shared.first_sight_max_age,
            shared.max_age,
            shared.sent,
        ),
        claimer=ChatClaimer(
            ledger,
            shared.hub,
            shared.recorder,
            permissions,
            shared.intents.for_messages(lambda o: o.inbound),
        ),
        ledger=ledger,
        watched=watched,
        hub=shared.hub,
        hints=shared.hints.view(ledger.kind.hint_tag),
        turns=shared.turns,
        metrics=shared.metrics,
        concurrency=shared.concurrency,
        roles=roles,
        on_notification_hint=on_notification_hint,
        book=book if book is not None else ChatBook(),
    )
