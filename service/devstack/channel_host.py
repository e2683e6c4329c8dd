"""A minimal AI host for the local stack: connects to replicas over MCP and records channel pushes.

It is what the demo prints from and what the fleet tests and benchmarks count deliveries with. It
uses the official ``mcp`` client exactly as a host would: the handshake era, a push stream, custom
notifications received through a ``ClientExtension``. Given a ``host_id`` it acknowledges as the channel
bridge does (``service/mcp/acknowledging.py``), so the fleet owes it what it claims for it until it says
it has it; without one it is an unacknowledging push host, delivered to at most once.
"""

from __future__ import annotations

import asyncio
import contextlib
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

from service.bridge.sdk_adapter import send_client_notification
from service.mcp.acknowledging import ACK_METHOD, HOST_ID_HEADER, MAX_ACK_KEYS
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
        return [
            NotificationBinding(
                method=CHANNEL_METHOD, params_type=ChannelParams, handler=self._handle
            )
        ]

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
    host_id: str | None = None
    pushes: list[ReceivedPush] = field(default_factory=list)
    connected_to: str | None = None
    connections: int = 0
    acknowledged: int = (
        0  # keys the fleet was told this host has (a repeat's key again, as the bridge does)
    )

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
        if self.host_id is not None:
            headers[HOST_ID_HEADER] = self.host_id
        # Kept per session: what a dying session had not yet acknowledged is pushed again by the fleet,
        # and acknowledged then.
        unacknowledged: dict[tuple[str, str], None] = {}
        ready = asyncio.Event()

        def record(params: ChannelParams) -> None:
            meta = params.meta
            push = ReceivedPush(
                self.name,
                url,
                str(meta.get("chat_id", "")),
                str(meta.get("message_id", "")),
                str(meta.get("user", "")),
                str(meta.get("ts", "")),
                params.content,
                time.time(),
            )
            self.pushes.append(push)
            if self.host_id is not None:
                unacknowledged[(push.chat_id, push.message_id)] = None
                ready.set()
            if self.on_push is not None:
                self.on_push(push)

        async with httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)
        ) as http:
            transport = streamable_http_client(url, http_client=http)
            client = Client(
                transport,
                extensions=[_Listener(record)],
                mode="legacy",
                client_info=Implementation(name=self.client_name, version="1.0"),
                read_timeout_seconds=30,
            )
            async with client:
                self.connected_to = url
                self.connections += 1
                await client.list_tools()
                acknowledging = asyncio.create_task(
                    self._acknowledge(client, unacknowledged, ready)
                )
                try:
                    while not stop.is_set() and not acknowledging.done():
                        # A cheap request every few seconds notices a dead replica even while no push arrives (the
                        # SDK deprecates ping outside the handshake era, so list_tools it is).
                        try:
                            await asyncio.wait_for(stop.wait(), 3.0)
                        except TimeoutError:
                            await client.list_tools()
                    if acknowledging.done():
                        acknowledging.result()  # a failed acknowledgement ends the session: reconnect
                finally:
                    acknowledging.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await acknowledging

    async def _acknowledge(
        self, client: Client, unacknowledged: dict[tuple[str, str], None], ready: asyncio.Event
    ) -> None:
        while True:
            await ready.wait()
            ready.clear()
            keys = list(unacknowledged)[:MAX_ACK_KEYS]
            if not keys:
                continue
            await send_client_notification(client, ACK_METHOD, {"keys": [list(k) for k in keys]})
            for key in keys:
                unacknowledged.pop(key, None)
            self.acknowledged += len(keys)
            if unacknowledged:
                ready.set()
