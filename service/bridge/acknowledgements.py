"""What the host has and the fleet has not heard yet: acknowledgements, batched on whichever session
is open.

A key goes in when the bridge has written its message to the host's stdin, and stays until a
session takes the batch that holds it, since a message the fleet has no acknowledgement for is
pushed again. A batch whose POST failed on the wire comes back whole (the fleet takes a repeat as one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from mcp_types import JSONRPCNotification

from service.bridge.backoff import Backoff
from service.bridge.waits import first_of
from service.mcp.acknowledging import ACK_METHOD, MAX_ACK_KEYS

Notify = Callable[[str, dict[str, Any]], Awaitable[bool]]


class PendingAcks:
    """Keys (chat or mailbox, message id) written to the host, not yet told to the fleet, in order.

    ``notify`` sends one notification on the current session and says whether it was handed to the
    transport; while it cannot, the batch waits a backoff delay and tries again.
    """

    def __init__(self, notify: Notify, backoff: Backoff) -> None:
        self._notify = notify
        self._backoff = backoff
        self._keys: dict[tuple[str, str], None] = {}
        self._ready = asyncio.Event()

    def add(self, key: tuple[str, str]) -> None:
        self._keys[key] = None
        self._ready.set()

    def requeue(self, notification: JSONRPCNotification) -> None:
        """An acknowledgement whose POST failed on the wire: its keys go back in the batch."""
        keys = (notification.params or {}).get("keys") or []
        for key in keys:
            if isinstance(key, list) and len(key) == 2:
                self._keys[(str(key[0]), str(key[1]))] = None
        self._ready.set()

    async def send(self, stop: asyncio.Event) -> None:
        """Send batches of at most ``MAX_ACK_KEYS`` as keys arrive, until ``stop`` is set."""
        while not stop.is_set():
            await first_of(self._ready.wait, stop.wait)
            if stop.is_set():
                return
            self._ready.clear()
            keys = list(self._keys)[:MAX_ACK_KEYS]
            if not keys:
                continue
            if await self._notify(ACK_METHOD, {"keys": [list(k) for k in keys]}):
                for key in keys:
                    self._keys.pop(key, None)
            else:
                await asyncio.sleep(self._backoff.delay(1))
            if self._keys:
                self._ready.set()
