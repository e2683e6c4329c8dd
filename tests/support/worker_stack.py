"""The workers wired as the replica wires them, on the emulator over real HTTP and a real store,
with a recording push target; tests drive the cycles themselves (no sleeps, no supervisor)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import httpx

from emulator.server import RunningEmulator
from service.config import Settings
from service.delivery.hub import DeliveryHub, TargetKind
from service.delivery.message import InboundMessage
from service.delivery.sponsors import SponsorGate
from service.devstack.emulator_env import agent_user_env
from service.graph.auth import token_provider_from_settings
from service.graph.client import GraphClient
from service.ledger import ChatLedger, EmailClaimer, InteractionLog, WatchedChats
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import Metrics
from service.workers.agent import load_agent_user
from service.workers.chat_poll import ChatPoller
from service.workers.discovery import Discovery
from service.workers.email_poll import EmailPoller
from service.workers.recorder import DeliveryRecorder


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

    async def deliver(self, message: InboundMessage) -> bool:
        self.received.append(message)
        return True

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

    async def aclose(self) -> None:
        await self.graph.aclose()
        await self.http.aclose()


async def build_stack(emulator: RunningEmulator, backend: MemoryBackend, *, is_cloud: bool) -> WorkerStack:
    settings = Settings(**{k.removeprefix("ENTRABOT_").lower(): v
                           for k, v in agent_user_env(emulator.seed, base_url=emulator.base_url).items()})
    metrics = Metrics()
    http = httpx.AsyncClient(timeout=30)
    tokens = token_provider_from_settings(settings, http, metrics=metrics)
    graph = GraphClient(settings.graph_url, tokens, http=http, metrics=metrics)
    agent = await load_agent_user(graph)
    hub = DeliveryHub(metrics=metrics)
    gate = SponsorGate((), tenant_id=settings.tenant_id)
    watched = WatchedChats(backend, metrics=metrics)
    interactions = InteractionLog(backend)
    recorder = DeliveryRecorder(interactions, "test-replica")
    chats = ChatPoller(graph=graph, ledger=ChatLedger(backend, metrics=metrics), watched=watched, hub=hub,
                       agent=agent, recorder=recorder, gate=gate, metrics=metrics,
                       first_sight_max_age=timedelta(hours=24))
    email = EmailPoller(graph, EmailClaimer(backend, is_cloud=is_cloud, metrics=metrics), hub, agent, recorder)
    discovery = Discovery(graph, watched, gate, agent_identity_id=settings.agent_identity_id,
                          directory=graph.with_tokens(tokens.agent_identity_tokens()))
    return WorkerStack(emulator, http, graph, hub, chats, email, discovery, watched, interactions, metrics)
