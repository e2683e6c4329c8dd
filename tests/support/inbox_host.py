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
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import Implementation

from service.domain.message import MessageKey
from service.mcp.acknowledging import HOST_ID_HEADER

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 30.0
RECONNECT_PAUSE_S = 0.5


@dataclass(frozen=True)
class InboxResult:
    keys: list[MessageKey]
    cursor: str
    items: list[dict[str, Any]] = field(default_factory=list)  # the messages as the tool gave them


InboxCall = Callable[[str | None, float], Coroutine[Any, Any, InboxResult]]


@dataclass
class InboxLoop:
    url: Callable[[], str]  # asked at each (re)connection
    token: str
    host_id: str | None = None
    wait_s: float = 5.0
    client_name: str = "codex-mcp-client"
    received: list[MessageKey] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    cursor: str | None = None
    calls: int = 0
    failures: int = 0
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def message_ids(self) -> list[str]:
        return [k.message_id for k in self.received]

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
        async with self.connected() as call:
            while not self._stop.is_set():
                result = await call(self.cursor, self.wait_s)
                self.received += result.keys
                self.items += result.items
                self.cursor = result.cursor

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[InboxCall]:
        """One connection, and single calls on it (``call(cursor, wait_s)``), for a test that drives the
        calls itself."""
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.host_id is not None:
            headers[HOST_ID_HEADER] = self.host_id
        async with (
            # The SDK's own client: its read timeout (300 s) outlasts a call's wait, where a bare
            # httpx2 client's 5 s ends the call's response stream mid-wait.
            create_mcp_http_client(headers=headers) as http,
            Client(
                streamable_http_client(self.url(), http_client=http),
                mode="legacy",
                client_info=Implementation(name=self.client_name, version="1.0"),
                read_timeout_seconds=CALL_TIMEOUT_S + self.wait_s,
            ) as client,
        ):

            async def call(cursor: str | None, wait_s: float) -> InboxResult:
                args: dict[str, Any] = {"wait_s": wait_s}
                if cursor is not None:
                    args["cursor"] = cursor
                self.calls += 1
                result = await client.call_tool("receive_messages", args)
                if result.is_error:
                    raise RuntimeError(f"receive_messages failed: {result.content}")
                out = result.structured_content
                assert isinstance(out, dict)
                keys = [MessageKey(m["chat_id"], m["message_id"]) for m in out["messages"]]
                return InboxResult(keys, out["cursor"], list(out["messages"]))

            yield call
