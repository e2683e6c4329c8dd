"""The per-replica face of the chat ledger (``ChatLedger``), and the cursors a chat gets without a
claim: the start a fleet role gives a chat it first watches, the baseline of a reader's first sight
that delivers nothing, and the start of a chat ``create_chat`` made. Each is created only where no
cursor exists (if_absent), so none of them ever moves a watermark some replica already wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Generic

from service.clock import Clock, utc_now
from service.ledger.claims.chat_claim_types import (
    ChatClaim,
    ChatClaimOutcome,
    ClaimProblem,
    ClaimRequest,
    CursorRead,
    M,
    UnsettledChatClaim,
)
from service.domain.conversation import TEAMS_CHATS, ConversationKind
from service.ledger.claims.chat_claims import claim_delivery, resolve_cursor
from service.ledger.claims.chat_cursor import (
    Candidate,
    ChatCursor,
    baseline_cursor,
    created_chat_cursor,
    first_watch_cursor,
    parse_chat_cursor,
    render_chat_cursor,
)
from service.ledger.claims.claim_intent import ClaimIntent
from service.ledger.claims.corrupt_cursors import CorruptCursors
from service.ledger.records.cas import Update, count_conflicts, update_value
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics


async def bootstrap_cursor(
    backend: MemoryBackend,
    kind: ConversationKind,
    chat_id: str,
    seen: Sequence[Candidate],
    *,
    clock: Clock = utc_now,
    metrics: LedgerMetrics,
) -> Update[ChatCursor]:
    """First sight without a delivery: create the cursor at the newest seen message (if_absent).

    Only a chat whose cursor read ABSENT may be bootstrapped; an existing cursor is never touched
    (ALREADY), so a replica that lost the race to a delivering sibling cannot move its watermark.
    """
    return await _create_cursor(backend, kind, chat_id, baseline_cursor(seen, now=clock()), metrics)


async def start_created_chat_cursor(
    backend: MemoryBackend,
    kind: ConversationKind,
    chat_id: str,
    newest: Candidate | None,
    *,
    clock: Clock = utc_now,
    metrics: LedgerMetrics,
) -> Update[ChatCursor]:
    """Record, for the whole fleet, that ``create_chat`` made this chat: its newest message (``newest``,
    None for an empty chat) surfaces whatever its age (see ``created_chat_cursor``).

    Created only where no cursor exists (if_absent): a chat some replica has already seen keeps the
    fleet's cursor, as it would on this replica alone.
    """
    return await _create_cursor(
        backend, kind, chat_id, created_chat_cursor(newest, now=clock()), metrics
    )


async def start_watched_chat_cursor(
    backend: MemoryBackend,
    kind: ConversationKind,
    chat_id: str,
    newest: Candidate | None,
    *,
    surface_newest: bool,
    clock: Clock = utc_now,
    metrics: LedgerMetrics,
) -> Update[ChatCursor]:
    """A chat's first watch (``first_watch_cursor``), with no host needed: what is written in the chat
    from now on waits in Graph, unclaimed, for the first replica that has a host."""
    cursor = first_watch_cursor(newest, now=clock(), surface_newest=surface_newest)
    return await _create_cursor(backend, kind, chat_id, cursor, metrics)


async def _create_cursor(
    backend: MemoryBackend,
    kind: ConversationKind,
    chat_id: str,
    cursor: ChatCursor,
    metrics: LedgerMetrics,
) -> Update[ChatCursor]:
    text = render_chat_cursor(cursor)
    update = await update_value(
        backend,
        kind.cursor_key(chat_id),
        parse=parse_chat_cursor,
        change=lambda current: text if current is None else None,
        attempts=2,
    )
    count_conflicts(metrics, kind.name, update)
    return update


class ChatLedger(Generic[M]):
    """The per-replica face of one kind's ledger (Teams chats unless told): one backend, one memory of
    unsettled writes (and of the messages each would win). Every kind of conversation shares this
    implementation; only the keys, from ``kind``, differ."""

    def __init__(
        self,
        backend: MemoryBackend,
        *,
        kind: ConversationKind = TEAMS_CHATS,
        clock: Clock = utc_now,
        metrics: LedgerMetrics,
        corrupt: CorruptCursors | None = None,
    ) -> None:
        self._backend = backend
        self.kind = kind
        # Chats stalled by a corrupt cursor, made visible (metric, /readyz) until repaired.
        self.corrupt = corrupt if corrupt is not None else CorruptCursors(metrics)
        self._clock = clock
        self._metrics = metrics
        self._unsettled: dict[str, UnsettledChatClaim[M]] = {}
        # One claim per chat at a time: two concurrent calls would overwrite each other's memory
        # of an unsettled write.
        self._chat_locks: dict[str, asyncio.Lock] = {}

    @property
    def unsettled_chats(self) -> frozenset[str]:
        return frozenset(self._unsettled)

    async def resolve(self, chat_id: str) -> CursorRead:
        read = await resolve_cursor(self._backend, self.kind, chat_id)
        self.corrupt.observe(chat_id, read)
        return read

    async def chats_with_cursors(self) -> frozenset[str]:
        """Every chat some replica has made its first sight of (its cursor exists, readable or not):
        one listing, a call per 5,000 chats on Blob, instead of a read per chat. Raises StorageError."""
        return frozenset(
            c
            for key in await self._backend.list(self.kind.cursor_prefix)
            if (c := self.kind.conversation_of_cursor_key(key)) is not None
        )

    async def claim(
        self,
        chat_id: str,
        candidates: Sequence[M],
        last_ts: datetime | None = None,
        *,
        advance_watermark: bool = True,
        new_chat: bool = False,
        intent: ClaimIntent[M] | None = None,
        known: CursorRead | None = None,
    ) -> ChatClaim[M]:
        async with self._chat_locks.setdefault(chat_id, asyncio.Lock()):
            request = ClaimRequest(
                chat_id, candidates, last_ts, advance_watermark, new_chat, intent, known
            )
            claim = await claim_delivery(
                self._backend,
                request,
                kind=self.kind,
                unsettled=self._unsettled,
                clock=self._clock,
                metrics=self._metrics,
            )
        if claim.problem is ClaimProblem.CORRUPT:
            self.corrupt.mark(chat_id)
        elif claim.outcome in (ChatClaimOutcome.CLAIMED, ChatClaimOutcome.LOST):
            self.corrupt.clear(chat_id)  # decided on a cursor that parsed
        return claim

    async def bootstrap(self, chat_id: str, seen: Sequence[Candidate]) -> Update[ChatCursor]:
        return await bootstrap_cursor(
            self._backend, self.kind, chat_id, seen, clock=self._clock, metrics=self._metrics
        )

    async def start_created_chat(
        self, chat_id: str, newest: Candidate | None
    ) -> Update[ChatCursor]:
        return await start_created_chat_cursor(
            self._backend, self.kind, chat_id, newest, clock=self._clock, metrics=self._metrics
        )

    async def start_watched_chat(
        self, chat_id: str, newest: Candidate | None, *, surface_newest: bool
    ) -> Update[ChatCursor]:
        return await start_watched_chat_cursor(
            self._backend,
            self.kind,
            chat_id,
            newest,
            surface_newest=surface_newest,
            clock=self._clock,
            metrics=self._metrics,
        )
