"""Waiting on whichever of several things happens first (anyio, so the rest are cancelled cleanly)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio


async def first_of(*waits: Callable[[], Awaitable[Any]]) -> None:
    """Return as soon as one of ``waits`` returns."""
    async with anyio.create_task_group() as group:

        async def wait_then_stop(wait: Callable[[], Awaitable[Any]]) -> None:
            await wait()
            group.cancel_scope.cancel()

        for wait in waits:
            group.start_soon(wait_then_stop, wait)
