"""Helpers shared by the ledger tests: a fake clock, Teams-shaped messages, a mail, a counting fetcher."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from service.ledger.claims.chat_cursor import Candidate

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def message(n: int, *, base: datetime = T0) -> Candidate:
    """The n-th message of a chat: Teams ids are epoch milliseconds, so the id follows the time."""
    ts = base + timedelta(milliseconds=n)
    return Candidate(str(int(ts.timestamp() * 1000)), ts)


def messages(first: int, last: int) -> list[Candidate]:
    return [message(n) for n in range(first, last + 1)]


@dataclass(frozen=True)
class Mail:
    id: str
    received_at: datetime


def mail(n: int, *, base: datetime = T0) -> Mail:
    return Mail(f"mail-{n:04d}", base + timedelta(seconds=n))


@dataclass
class CountingMailbox:
    """A fake Graph mailbox: returns the oldest page of mail newer than ``since``, and counts calls."""

    mails: list[Mail] = field(default_factory=list)
    page: int = 50
    calls: int = 0

    async def fetch(self, since: datetime) -> Sequence[Mail]:
        self.calls += 1
        newer = sorted(
            (m for m in self.mails if m.received_at > since), key=lambda m: m.received_at
        )
        return newer[: self.page]


@dataclass(frozen=True)
class SentWrite:
    key: str
    content: str
    if_match: str | None
    if_absent: bool


class RecordingBackend:
    """Forwards to ``inner`` and records every conditional write that was sent, in order."""

    def __init__(self, inner) -> None:  # noqa: ANN001 - any MemoryBackend
        self.inner = inner
        self.writes: list[SentWrite] = []

    def __getattr__(self, name: str):  # noqa: ANN204 - forwards the rest of the protocol
        return getattr(self.inner, name)

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        self.writes.append(SentWrite(key, content, if_match, if_absent))
        return await self.inner.write_text(key, content, if_match=if_match, if_absent=if_absent)

    def writes_to(self, key: str) -> list[SentWrite]:
        return [w for w in self.writes if w.key == key]


def sample(metrics, name: str, **labels: str) -> float:  # noqa: ANN001 - a service Metrics
    """The current value of one metric sample (0 when it was never recorded)."""
    return metrics.registry.get_sample_value(name, labels) or 0.0


class CancelledAfterCommit:
    """The write lands, then the task that sent it is cancelled before it hears back (once)."""

    def __init__(self, inner) -> None:  # noqa: ANN001 - any MemoryBackend
        self.inner = inner
        self.armed = True

    def __getattr__(self, name: str):  # noqa: ANN204 - forwards the rest of the protocol
        return getattr(self.inner, name)

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        etag = await self.inner.write_text(key, content, if_match=if_match, if_absent=if_absent)
        if self.armed:
            self.armed = False
            raise asyncio.CancelledError
        return etag
