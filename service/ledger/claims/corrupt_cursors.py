"""The chats this replica found with a corrupt shared cursor: stalled until an operator repairs them.

A corrupt cursor claims nothing, on every replica and every cycle. That is right (nothing can be
decided against a value nobody can read, and the messages stay in Graph), but nothing un-stalls the
chat by itself. So each chat is named once in the log with the command that repairs it, counted in
the ``entrabot_chat_cursors_corrupt`` gauge, and listed in ``/readyz`` as a detail that does not fail
readiness: the replica still serves every other chat.
"""

from __future__ import annotations

import logging
from typing import Any

from service.ledger.records.reads import Read, ReadOutcome, UnresolvedReason
from service.telemetry.metrics import LedgerMetrics

log = logging.getLogger(__name__)

REPAIR_COMMAND = "entrabot-fleet repair-chat"


class CorruptCursors:
    """Chat ids whose last cursor read here was corrupt; a later readable (or absent) read clears one."""

    def __init__(self, metrics: LedgerMetrics) -> None:
        self._metrics = metrics
        self._chats: set[str] = set()

    @property
    def chat_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._chats))

    def observe(self, chat_id: str, read: Read[Any]) -> None:
        """Note what one read of a chat's cursor said. A failed read or a value without an ETag says
        nothing about the stored value, so it changes nothing here."""
        if read.outcome is not ReadOutcome.UNRESOLVED:
            self.clear(chat_id)
        elif read.reason is UnresolvedReason.CORRUPT:
            self.mark(chat_id)

    def mark(self, chat_id: str) -> None:
        if chat_id in self._chats:
            return
        self._chats.add(chat_id)
        self._publish()
        log.warning(
            "chat cursor is corrupt: the chat gets no deliveries until it is repaired with "
            f"`{REPAIR_COMMAND} CHAT_ID --yes`",
            extra={"chat_id": chat_id},
        )

    def clear(self, chat_id: str) -> None:
        if chat_id not in self._chats:
            return
        self._chats.discard(chat_id)
        self._publish()
        log.info(
            "chat cursor is readable again; the chat is polled as usual", extra={"chat_id": chat_id}
        )

    def _publish(self) -> None:
        self._metrics.chat_cursors_corrupt.set(len(self._chats))
