"""Waiting for a condition in end-to-end tests: polled, bounded, and failing with what was awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

WAIT_S = 60.0


async def eventually(what: str, check: Callable[[], Awaitable[bool]], *, wait_s: float = WAIT_S) -> None:
    """Poll ``check`` until it holds (bounded): a condition, not a sleep."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {wait_s:.0f} s: {what}")
        await asyncio.sleep(0.2)
