"""Waiting for a condition in tests: polled, bounded, and failing with what was awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

WAIT_BOUND_S = 10.0  # every wait of an in-process test ends by itself within this bound
# End-to-end tests wait on replica processes, Prometheus or Azurite: longer, and polled less often.
SLOW_WAIT_S = 60.0
SLOW_POLL_S = 0.2


async def eventually(
    check: Callable[[], Any], what: str, *, timeout_s: float = WAIT_BOUND_S, poll_s: float = 0.02
) -> Any:
    """Poll ``check`` (plain or async) until it returns something truthy, and return that; fail naming
    ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (within {timeout_s:g} s)")
        await asyncio.sleep(poll_s)
