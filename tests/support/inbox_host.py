"""A host without pushes that drains the fleet's inbox in a loop, as a model told by the fleet's
instructions would: the official MCP Python client calling ``receive_messages`` with each result's
cursor, reconnecting (through whatever URL it was given: a balancer, or one replica) when a replica
dies under it, and keeping the cursor across reconnects as a host keeps it across its own restarts.

What it records is what reached "the model": the messages of every result that came back. A call that
failed or was cancelled returned nothing to it, so its messages must come back on a later call.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from service.domain.message import MessageKey
from service.mcp.acknowledging import HOST_ID_HEADER

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 30.0
RECONNECT_PAUSE_S = 0.5


@dataclass
class InboxLoop:
    url: Callable[[], str]  # asked at each (re)connection
    token: str
    host_id: str | None = None
    wait_s: float = 5.0
    client_name: str = "codex-mcp-client"
    received: list[MessageKey] = field(default_factory=list)
    cursor: str | None = None
    calls: int = 0
    failures: int = 0
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def counts(self) -> Counter[MessageKey]:
        return Counter(self.received)

    def stop(self) -> None:
        self._stop.set()

    async def run(self, max_failures: int = 50) -> None:
        """Until ``stop``: connect, call in a loop; reconnect after any failure (bounded)."""
        while not self._stop.is_set():
            try:
                await self._session()
            except Exception as exc:  # a replica died or a stream was cut: connect again
                self.failures += 1
                log.info("inbox host reconnects after %s", type(exc).__name__)
                if self.failures > max_failures:
                    raise
                await asyncio.sleep(RECONNECT_PAUSE_S)

    async def _session(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.host_id is not None:
            headers[HOST_ID_HEADER] = self.host_id
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(
                streamable_http_client(self.url(), http_client=http),
                mode="legacy",
                client_info=Implementation(name=self.client_name, version="1.0"),
                read_timeout_seconds=CALL_TIMEOUT_S + self.wait_s,
            ) as client,
        ):
            while not self._stop.is_set():
                await self._call(client)

    async def _call(self, client: Client) -> None:
        args: dict[str, Any] = {"wait_s": self.wait_s}
        if self.cursor is not None:
            args["cursor"] = self.cursor
        self.calls += 1
        result = await client.call_tool("receive_messages", args)
        if result.is_error:
            raise RuntimeError(f"receive_messages failed: {result.content}")
        out = result.structured_content
        assert isinstance(out, dict)
        self.received += [MessageKey(m["chat_id"], m["message_id"]) for m in out["messages"]]
        self.cursor = out["cursor"]
