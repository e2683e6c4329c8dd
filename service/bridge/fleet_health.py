"""What the bridge knows of the fleet right now: whether its latest attempt at a session has settled,
and, when it failed, why, in the words the host's log and the model both get.

A tool call while no session is open waits only until the current attempt settles, then answers
with the cause (a refused token, an unreachable URL, a 5xx): a cause that will not change by waiting
is not worth the host's ten seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time

from service.bridge.fleet_failures import describe

log = logging.getLogger(__name__)


class FleetHealth:
    def __init__(self, url: str) -> None:
        self.url = url
        self.last_error: str | None = None
        self._settled = asyncio.Event()
        self._refusal: tuple[float, int, str] | None = (
            None  # the latest HTTP error: when, status, why
        )
        self.in_session = False

    async def settled(self, timeout_s: float) -> bool:
        """Whether the latest attempt at a session has ended, opened or failed, waiting up to ``timeout_s``."""
        try:
            await asyncio.wait_for(self._settled.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def note(self, reason: str) -> None:
        """One stderr line per new reason, so a fleet down for an hour does not flood the host's log."""
        if reason != self.last_error:
            log.warning("fleet unavailable", extra={"reason": reason})
        self.last_error = reason

    def refused(self, status: int, reason: str) -> None:
        """The fleet answered an HTTP error status. While opening a session the SDK sees only "an error
        response", so the reason is kept for the attempt's end; within a session it is said at once (a
        notification's refusal reaches no one else)."""
        self._refusal = (time.monotonic(), status, reason)
        if self.in_session:
            self.note(reason)

    def refusal_since(self, started: float) -> tuple[int, str] | None:
        """The latest HTTP error status and its reason, if one came after ``started``."""
        refusal = self._refusal
        return refusal[1:] if refusal is not None and refusal[0] >= started else None

    def attempt_failed(self, exc: BaseException, started: float) -> None:
        refusal = self.refusal_since(started)
        self.note(refusal[1] if refusal else describe(exc, self.url))
        self._settled.set()

    def opened(self) -> None:
        self.last_error = None
        self.in_session = True
        self._settled.set()

    def closed(self) -> None:
        """The session ended: the next attempt starts at once, and a call waits for it."""
        self.in_session = False
        self._settled.clear()
