"""What the tools need, built once by the app factory and handed to every tool module."""

from __future__ import annotations

from dataclasses import dataclass

from service.config import Settings
from service.delivery.hub import DeliveryHub
from service.delivery.sent_messages import SentMessages
from service.delivery.sponsors import SponsorGate
from service.graph.client import GraphClient
from service.ledger import DailySummaryProducer, InteractionLog, PromiseLedger, WatchedChats
from service.clock import Clock, utc_now
from service.domain.agent import AgentUser
from service.workers.chat_poll import ChatPoller
from service.workers.discovery import Discovery


@dataclass
class ToolDeps:
    settings: Settings
    graph: GraphClient
    agent: AgentUser
    hub: DeliveryHub
    watched: WatchedChats
    chat_poller: ChatPoller
    discovery: Discovery
    gate: SponsorGate
    promises: PromiseLedger
    interactions: InteractionLog
    summary: DailySummaryProducer
    # Graph ids of messages this replica sent (delegated mode: Graph attributes them to the human);
    # the same object the chat poll reads.
    sent_messages: SentMessages
    replica_id: str
    clock: Clock = utc_now
