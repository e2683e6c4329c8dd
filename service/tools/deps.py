"""What the tools need, built once by the app factory and handed to every tool module."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.config import Settings
from service.delivery.hub import DeliveryHub
from service.delivery.sponsors import SponsorGate
from service.graph.client import GraphClient
from service.ledger import DailySummaryProducer, InteractionLog, PromiseLedger, WatchedChats
from service.ledger.clock import Clock, utc_now
from service.ledger.permission_requests import PermissionRequests
from service.workers.agent import AgentUser
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
    replica_id: str
    clock: Clock = utc_now
    permissions: PermissionRequests | None = None  # None: no permission relay on this replica
    # Graph ids of messages this replica sent (delegated mode: Graph attributes them to the human).
    sent_message_ids: set[str] = field(default_factory=set)
