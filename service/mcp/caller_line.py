"""CallerLine: whether the host that made a tool call can still take its result.

A tool result goes out on the POST's response stream. When the host's connection closes without a
``notifications/cancelled`` (the host died, a proxy cut the connection), the SDK does not cancel the
handler: it runs on, and its result is stored in the session's history and written to no connection.
A host may resume that stream with ``Last-Event-ID`` (the SDK's client does, about a second after a
drop), and the answer then goes out on the resumed stream. So the line counts as gone only once the
request's stream has been without a connection for ``grace_s``.

``attached`` is read from the SDK's transport (``sdk_adapter.PerSessionEventStoreManager``); it turns
false as soon as the server notices the connection closed, which for a TCP close is the next turn of
its event loop. What it cannot see: a connection that dies after the last look, while the result is
on its way out, or a host that got the bytes and crashed before using them (docs/delivery.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

# The SDK's client waits 1 s (or the server's SSE retry) before it resumes a dropped response stream, and
# tries twice: a stream without a connection this long is not coming back.
RESUME_GRACE_S = 5.0
POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class CallerLine:
    """One tool call's way back to its host."""

    attached: Callable[[], bool]  # the request's response stream has a connection right now
    grace_s: float = RESUME_GRACE_S
    poll_s: float = POLL_S

    async def listening(self) -> bool:
        """Whether the result can go out: the stream has a connection now, or gets one again (a
        resume) within ``grace_s``."""
        deadline = time.monotonic() + self.grace_s
        while not self.attached():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.poll_s)
        return True

    async def gone(self) -> None:
        """Return once the host can no longer take the result (see ``listening``)."""
        while await self.listening():
            await asyncio.sleep(self.poll_s)
