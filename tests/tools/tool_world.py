"""One replica's tool dependencies, built for real around a Graph emulator served over HTTP.

The replica's own wiring (``service.replica_clients.build_clients``, ``service.wiring.wire_workers``)
around a GraphClient with the three-hop agent-user token, a LocalBackend, a DeliveryHub and a settable clock, minus the supervisor: a test
drives ``poller.cycle()`` itself while a tool waits.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from mcp_types import CallToolResult
from settings_env import HAND_DRIVEN_CYCLES
from sign_in_kit import delegated_seed, new_token_key, sign_in_as
from tool_results import result_text

from emulator.seed import Seed, SeedUser
from emulator.server import RunningEmulator
from service.config import Settings
from service.delivery.hub import DeliveryHub, Handover, TargetKind
from service.domain.agent import AgentUser
from service.domain.message import InboundMessage
from service.graph import new_http_client
from service.graph.auth import (
    AgentUserIdentity,
    AgentUserTokenProvider,
    BlueprintSecret,
    TokenProvider,
)
from service.graph.retry_policy import RetryPolicy
from service.ledger.memory.interactions import InteractionLog
from service.ledger.memory.promises import PromiseLedger
from service.ledger.memory.watched_chats import WatchedChats
from service.mcp.sessions import SessionState
from service.mcp.tool_registry import ToolCall, ToolRegistry
from service.replica_clients import build_clients, load_agent_user
from service.storage.backend import MemoryBackend
from service.storage.local import LocalBackend
from service.telemetry.metrics import GraphMetrics, Metrics
from service.tools.deps import ToolDeps
from service.tools.registry import register_tools
from service.wiring import wire_delivery, wire_workers
from service.workers.chat_poll import ChatPoller
from service.workers.discovery import Discovery

# Ada sponsors the agent; Grace and Alan are other people. Chat 0 is the agent's oneOnOne with Ada,
# chats 1 and 2 are group chats of the agent, Ada and Grace (1) or Alan (2). No history. Two shared
# mailboxes: support@ (shared with the agent) and finance@ (not). Device codes may be polled every
# second (a delegated world signs a person in).
SEED: Seed = delegated_seed(chats=3, humans=3, history=0, shared_mailboxes=True)
BLUEPRINT_SECRET = "blueprint-dev-secret"
FAST_BACKOFF = RetryPolicy(backoff_base=0.01, backoff_cap=0.05)
WAIT_POLLS = 500  # bounded loop while a tool call gets to its wait


@dataclass
class SettableClock:
    """The replica's clock; a test may pin it to a moment."""

    pinned: datetime | None = None

    def __call__(self) -> datetime:
        return self.pinned or datetime.now(timezone.utc)


@dataclass(eq=False)
class RecordingPushTarget:
    """A push-capable session as the hub sees it, keeping what it was handed."""

    target_id: str = "push:recording"
    received: list[InboundMessage] = field(default_factory=list)

    @property
    def kind(self) -> TargetKind:
        return TargetKind.PUSH

    def is_alive(self) -> bool:
        return True

    def accepts(self, message: InboundMessage) -> bool:
        return True

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        return True  # a push session is unbounded (the hub does not ask)

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        """Never told: a push session is not allotted."""

    async def deliver(self, message: InboundMessage) -> Handover:
        self.received.append(message)
        return Handover.TAKEN


def session(session_id: str, *, push: bool) -> SessionState:
    now = datetime.now(timezone.utc)
    return SessionState(
        session_id=session_id,
        client_name="claude-code" if push else "codex",
        client_version="1.0",
        protocol_version="2025-11-25",
        push_capable=push,
        created_at=now,
        last_activity_at=now,
    )


@dataclass
class ToolWorld:
    emu: RunningEmulator
    http: httpx.AsyncClient
    settings: Settings
    backend: MemoryBackend
    hub: DeliveryHub
    agent: AgentUser
    watched: WatchedChats
    poller: ChatPoller
    discovery: Discovery
    interactions: InteractionLog
    promises: PromiseLedger
    deps: ToolDeps
    tools: ToolRegistry
    clock: SettableClock

    @property
    def seed(self) -> Seed:
        return self.emu.seed

    def chat(self, index: int) -> str:
        chat_id = self.seed.chats[index].id
        assert chat_id is not None
        return chat_id

    def user(self, given_name: str) -> SeedUser:
        return next(u for u in self.seed.users if u.given_name == given_name)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        push: bool = False,
        session_id: str | None = "session-1",
    ) -> CallToolResult:
        """``session_id`` None: a call with no session, as every MCP 2026-07-28 call is."""
        state = session(session_id, push=push) if session_id is not None else None
        call = ToolCall(session=state, hub=self.hub, request_id=1)
        return await self.tools.call(name, arguments, call)

    async def ok(
        self, name: str, arguments: dict[str, Any] | None = None, **how: Any
    ) -> dict[str, Any]:
        """The structured result of a call that must succeed."""
        result = await self.call(name, arguments, **how)
        assert not result.is_error, result_text(result)
        assert result.structured_content is not None
        assert json.loads(result_text(result)) == result.structured_content
        return result.structured_content

    async def error(self, name: str, arguments: dict[str, Any] | None = None, **how: Any) -> str:
        """The error text of a call that must fail."""
        result = await self.call(name, arguments, **how)
        assert result.is_error, result.structured_content
        return result_text(result)

    async def admin(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post(f"{self.emu.admin_url}/{path}", json=body)
        assert response.status_code == 201, response.text
        return response.json()

    async def inject(self, chat_id: str, sender: str | None, content: str, **extra: Any) -> str:
        """Post into a chat as a person (``sender`` a given name, or None with a system message type)."""
        body = {"from_user": self.user(sender).id if sender else None, "content": content, **extra}
        return (await self.admin(f"chats/{chat_id}/messages", body))["id"]

    async def until_waiting(self) -> None:
        """Return once a sponsor wait is registered in the hub (the tool call reached its wait)."""
        for _ in range(WAIT_POLLS):
            if any(t.kind is TargetKind.SPONSOR_WAIT for t in self.hub.live_targets()):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("no sponsor wait was registered")


@asynccontextmanager
async def tool_world(
    emu: RunningEmulator,
    data_dir: Path,
    *,
    signed_in: str | None = None,
    backend: MemoryBackend | None = None,
    replica_id: str = "replica-test",
    **settings: Any,
) -> AsyncIterator[ToolWorld]:
    """``signed_in``: delegated mode, as this person (UPN) signed in by device code; else the agent user.
    ``backend``: the shared store (default: a LocalBackend of its own under ``data_dir``)."""
    seed = emu.seed
    clock = SettableClock()
    defaults: dict[str, Any] = {
        "agent_identity_id": seed.agent_identity.id,
        "sponsor_wait_timeout_s": 30.0,
        "graph_url": emu.graph_url,
        **HAND_DRIVEN_CYCLES,
    }
    if signed_in is not None:
        defaults.update(
            auth_mode="delegated",
            agent_identity_id=None,
            delegated_client_id=seed.public_client.app_id,
            delegated_token_key=new_token_key(),
        )
    config = Settings(
        _env_file=None,
        data_dir=data_dir,
        authority=emu.authority,
        tenant_id=seed.tenant_id,
        **{**defaults, **settings},
    )
    async with new_http_client() as http:
        store = backend or LocalBackend(data_dir / "state")
        tokens: TokenProvider | None = (
            None  # delegated: build_clients reads the signed-in person's record
        )
        if signed_in is not None:
            await sign_in_as(emu, config, store, signed_in)
        else:
            identity = AgentUserIdentity(
                emu.authority,
                seed.tenant_id,
                seed.blueprint.app_id,
                seed.agent_identity.id,
                seed.agent_user.id,
            )
            tokens = AgentUserTokenProvider(
                identity, BlueprintSecret(BLUEPRINT_SECRET), http=http, metrics=GraphMetrics()
            )
        metrics = Metrics()
        clients = build_clients(
            config,
            store,
            http,
            replica_id=replica_id,
            metrics=metrics,
            tokens=tokens,
            retry_policy=FAST_BACKOFF,
        )
        delivery = wire_delivery(
            config, store, replica_id=replica_id, metrics=metrics, graph=clients.graph, clock=clock
        )
        hub = delivery.hub
        agent = await load_agent_user(clients.graph, posts_as_person=signed_in is not None)
        wired = await wire_workers(
            settings=config,
            backend=store,
            is_cloud=False,
            graph=clients.graph,
            delivery=delivery,
            agent=agent,
            gate=clients.gate,
            replica_id=replica_id,
            metrics=metrics,
            clock=clock,
            directory=clients.directory,
        )
        tools = ToolRegistry()
        register_tools(tools, wired.tool_deps, delivery.inbox)
        await (
            wired.discovery.cycle()
        )  # as the replica does before its loops: sponsors, members, watched chats
        yield ToolWorld(
            emu,
            http,
            config,
            store,
            hub,
            agent,
            wired.watched,
            wired.chat_poller,
            wired.discovery,
            wired.interactions,
            wired.promises,
            wired.tool_deps,
            tools,
            clock,
        )
