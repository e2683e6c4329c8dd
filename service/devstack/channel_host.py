"""A minimal AI host for the local stack: connects to replicas over MCP and records channel pushes.

It is what the demo prints from and what the fleet tests and benchmarks count deliveries with. It
uses the official ``mcp`` client exactly as a host would: the handshake era, a push stream, custom
notifications received through a ``ClientExtension``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation
from pydantic import BaseModel, ConfigDict

from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME

log = logging.getLogger(__name__)

CHANNEL_METHOD = "notifications/claude/channel"
RECONNECT_DELAY_S = 0.5


class ChannelParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    meta: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReceivedPush:
    host: str
    replica_url: str
    chat_id: str
    message_id: str
    user: str
    ts: str
    content: str
    received_at: float  # wall clock (time.time()), to measure delivery latency against message time


class _Listener(ClientExtension):
    identifier = "dev.entrabot/channel-host"

    def __init__(self, on_push: Callable[[ChannelParams], None]) -> None:
        self._on_push = on_push

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method=CHANNEL_METHOD, params_type=ChannelParams, handler=self._handle)]

    async def _handle(self, params: ChannelParams) -> None:
        self._on_push(params)


@dataclass
class ChannelHost:
    """One host. ``urls`` are replica /mcp endpoints tried in turn: when its replica dies, the host
    re-initializes on the next one, as a host behind a Kubernetes Service would."""

    name: str
    urls: Sequence[str]
    token: str | None = None
    # A replica pushes only to the names in ENTRABOT_PUSH_HOSTS, by default the channel bridge's push
    # name: this host stands in for a bridge run with --push.
    client_name: str = BRIDGE_PUSH_CLIENT_NAME
    on_push: Callable[[ReceivedPush], None] | None = None
    pushes: list[ReceivedPush] = field(default_factory=list)
    connected_to: str | None = None
    connections: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Stay connected until ``stop`` is set, reconnecting (bounded delay) when a replica goes away."""
        index = 0
        while not stop.is_set():
            url = self.urls[index % len(self.urls)]
            try:
                await self._session(url, stop)
            except Exception as exc:  # noqa: BLE001 - any failure means "try the next replica"
                log.info("host %s lost %s (%s); reconnecting", self.name, url, type(exc).__name__)
            self.connected_to = None
            index += 1
            try:
                await asyncio.wait_for(stop.wait(), RECONNECT_DELAY_S)
            except TimeoutError:
                pass

    async def _session(self, url: str, stop: asyncio.Event) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}

        def record(params: ChannelParams) -> None:
            meta = params.meta
            push = ReceivedPush(
                self.name, url, str(meta.get("chat_id", "")), str(meta.get("message_id", "")),
                str(meta.get("user", "")), str(meta.get("ts", "")), params.content, time.time(),
            )
            self.pushes.append(push)
            if self.on_push is not None:
                self.on_push(push)

        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http:
            transport = streamable_http_client(url, http_client=http)
            client = Client(
                transport, extensions=[_Listener(record)], mode="legacy",
                client_info=Implementation(name=self.client_name, version="1.0"), read_timeout_seconds=30,
            )
            async with client:
                self.connected_to = url
                self.connections += 1
                await client.list_tools()
                while not stop.is_set():
                    # A cheap request every few seconds notices a dead replica even while no push arrives (the SDK
                    # deprecates ping outside the handshake era, so list_tools it is).
                    try:
                        await asyncio.wait_for(stop.wait(), 3.0)
                    except TimeoutError:
                        await client.list_tools()
