"""The workers wired by the replica's own wiring, on the emulator over real HTTP and a real store,
with a recording push target; tests drive the cycles themselves (no sleeps, no supervisor)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

import httpx
from settings_env import HAND_DRIVEN_CYCLES, as_env, settings_from_env

from emulator.server import RunningEmulator
from service.delivery.hub import DeliveryHub, Handover, TargetKind
from service.devstack.emulator_env import agent_user_env
from service.domain.message import InboundMessage
from service.graph.client import GraphClient
from service.graph.retry_policy import RetryPolicy
from service.ledger.fleet.graph_backoff import FleetBackoff
from service.ledger.fleet.hints import Hint, HintLog
from service.ledger.memory.interactions import InteractionLog
from service.ledger.memory.watched_chats import WatchedChats
from service.replica_clients import build_clients, load_agent_user
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import Metrics
from service.wiring import wire_delivery, wire_workers
from service.workers.chat_poll import ChatPoller
from service.workers.discovery import Discovery
from service.workers.email_poll import EmailPoller


@dataclass
class RecordingTarget:
    target_id: str = "recorder"
    kind: TargetKind = TargetKind.PUSH
    alive: bool = True
    received: list[InboundMessage] = field(default_factory=list)

    def is_alive(self) -> bool:
        return self.alive

    def accepts(self, message: InboundMessage) -> bool:
        return True

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        return not alongside  # as a bounded kind: one message per allotment

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        """A recorder keeps only what it is handed."""

    async def deliver(self, message: InboundMessage) -> Handover:
        self.received.append(message)
        return Handover.TAKEN

    @property
    def ids(self) -> list[str]:
        return [m.message_id for m in self.received]


@dataclass
class WorkerStack:
    emulator: RunningEmulator
    http: httpx.AsyncClient
    graph: GraphClient
    hub: DeliveryHub
    chats: ChatPoller
    email: EmailPoller
    discovery: Discovery
    watched: WatchedChats
    interactions: InteractionLog
    metrics: Metrics
    backend: MemoryBackend
    graph_backoff: FleetBackoff
    channels: ChatPoller | None = None  # team channels' poll (agent-user mode)

    async def notify(self, chat_id: str, message_id: str | None = None) -> None:
        """What the notification receiver writes when Graph reports a change in ``chat_id``."""
        await HintLog(self.backend).add(
            [Hint(chat_id, datetime.now(timezone.utc), message_id, "notification")]
        )

    async def aclose(self) -> None:
        await self.graph.aclose()
        await self.http.aclose()


async def build_stack(
    emulator: RunningEmulator,
    backend: MemoryBackend,
    *,
    is_cloud: bool,
    replica_id: str = "test-replica",
    transport: httpx.AsyncBaseTransport | None = None,
    retry_policy: RetryPolicy | None = None,
) -> WorkerStack:
    """``transport``: what carries the Graph requests (default: real HTTP to the emulator), for a test
    that alters what comes back over the wire; ``retry_policy``: the Graph client's (default: the
    service's), for a test about what happens after Graph fails rather than how long it is retried."""
    settings = settings_from_env(
        {**agent_user_env(emulator.seed, base_url=emulator.base_url), **as_env(HAND_DRIVEN_CYCLES)}
    )
    metrics = Metrics()
    http = httpx.AsyncClient(timeout=30, transport=transport)
    clients = build_clients(
        settings, backend, http, replica_id=replica_id, metrics=metrics, retry_policy=retry_policy
    )
    agent = await load_agent_user(clients.graph)
    delivery = wire_delivery(
        settings, backend, replica_id=replica_id, metrics=metrics, graph=clients.graph
    )
    wired = await wire_workers(
        settings=settings,
        backend=backend,
        is_cloud=is_cloud,
        graph=clients.graph,
        delivery=delivery,
        agent=agent,
        gate=clients.gate,
        replica_id=replica_id,
        metrics=metrics,
        directory=clients.directory,
    )
    return WorkerStack(
        emulator,
        http,
        clients.graph,
        delivery.hub,
        wired.chat_poller,
        wired.email_poller,
        wired.discovery,
        wired.watched,
        wired.interactions,
        metrics,
        backend,
        clients.graph_backoff,
        wired.channel_poller,
    )
