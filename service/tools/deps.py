"""What the tools need, built once by the wiring (``service.wiring``) and handed to every tool module.

The tools reach the two loops they must tell about a new chat through the small protocols below, so
this layer does not depend on the workers' modules (the wiring hands in the real ChatPoller and Discovery).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from service.delivery.hub import DeliveryHub
from service.delivery.mail_send import MailSender
from service.domain.sponsors import SponsorGate
from service.graph.client import GraphClient
from service.ledger.memory.interactions import InteractionLog
from service.ledger.memory.promises import PromiseLedger
from service.ledger.memory.watched_chats import WatchedChats, WatchOutcome
from service.ledger.summary.production import DailySummaryProducer
from service.clock import Clock, utc_now
from service.ledger.memory.permission_requests import PermissionRequests
from service.ledger.memory.sent_messages import SentMessages
from service.tools.channel_send import ChannelSender
from service.tools.chat_send import ChatSender
from service.tools.options import ToolOptions
from service.domain.agent import AgentUser


class CreatedChatPolling(Protocol):
    """The chat poll: a chat the agent just created surfaces its newest message on first sight."""

    async def register_created_chat(self, chat_id: str) -> None: ...


class ChatRegistration(Protocol):
    """Discovery: a chat is watched at once and its members learnt for the sponsor gate."""

    async def register_chat(self, chat_id: str) -> WatchOutcome: ...


@dataclass
class NewChatLoops:
    """The two loops a chat the agent just created or joined must be told about."""

    chat_poller: CreatedChatPolling
    discovery: ChatRegistration


@dataclass
class Outbox:
    """Every mail, chat post (message, card, placeholder) and channel post or reply the agent sends goes
    through these, so each is sent once."""

    mail: MailSender
    chat: ChatSender
    channel: ChannelSender


@dataclass
class ToolDeps:
    options: ToolOptions
    graph: GraphClient
    agent: AgentUser
    hub: DeliveryHub
    watched: WatchedChats
    loops: NewChatLoops
    gate: SponsorGate
    promises: PromiseLedger
    interactions: InteractionLog
    summary: DailySummaryProducer
    # The fleet's record of the agent's sent messages (delegated mode: Graph attributes them to the
    # signed-in person); the chat poll of every replica reads it.
    sent_messages: SentMessages
    replica_id: str
    outbox: Outbox
    clock: Clock = utc_now
    permissions: PermissionRequests | None = None  # None: no permission relay on this replica
