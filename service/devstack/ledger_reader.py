"""The shared ledger as the harnesses read it, straight from Azurite: cursors, leases, host records
and the interaction log."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict

from service.delivery.host_record import HostRecord, parse_host_record, record_key
from service.devstack.delivery_account import LedgerSnapshot
from service.domain.message import MessageKey
from service.domain.conversation import TEAM_CHANNELS, TEAMS_CHATS
from service.ledger.claims.chat_cursor import ChatCursor, parse_chat_cursor
from service.ledger.claims.email_cursor import EMAIL_CURSOR_KEY, parse_email_cursor
from service.ledger.memory.interactions import INTERACTIONS_PREFIX
from service.ledger.fleet.leases import LeaseRecord, lease_key, parse_lease
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.storage.blob import BlobBackend

# receivedDateTime has whole-second precision: mail in the second the email cursor was initialized
# in would be older than it. Traffic starts after this much time past the initialization.
MAIL_CURSOR_MARGIN_S = 1.5


class LedgerReader:
    """Reads the shared ledger straight from Azurite (not through the fault proxy)."""

    def __init__(self, backend: BlobBackend) -> None:
        self._backend = backend

    async def chat_cursor_count(self) -> int:
        return len(await self._backend.list(TEAMS_CHATS.cursor_prefix))

    async def channel_cursor_count(self) -> int:
        return len(await self._backend.list(TEAM_CHANNELS.cursor_prefix))

    async def has_email_cursor(self) -> bool:
        return await self._backend.exists(EMAIL_CURSOR_KEY)

    async def lease(self, role: str) -> LeaseRecord | None:
        """The role's lease record; None when absent or unreadable (the caller reads again)."""
        read = await read_parsed(self._backend, lease_key(role), parse_lease)
        return read.value if read.outcome is ReadOutcome.PRESENT else None

    async def host_record(self, host_id: str) -> HostRecord | None:
        """An acknowledging host's delivery record; None when absent or unreadable (the caller reads again)."""
        read = await read_parsed(self._backend, record_key(host_id), parse_host_record)
        return read.value if read.outcome is ReadOutcome.PRESENT else None

    async def snapshot(self) -> LedgerSnapshot:
        keys = await self._backend.list(TEAMS_CHATS.cursor_prefix)
        texts = await asyncio.gather(*(self._backend.read_text(k) for k in keys))
        cursors: dict[str, ChatCursor] = {}
        for key, text in zip(keys, texts, strict=True):
            chat_id = TEAMS_CHATS.conversation_of_cursor_key(key)
            if text is not None and chat_id is not None:
                cursors[chat_id] = parse_chat_cursor(text)
        email = await self._backend.read_text(EMAIL_CURSOR_KEY)
        return LedgerSnapshot(cursors, parse_email_cursor(email) if email is not None else None)

    async def interactions(self) -> dict[MessageKey, list[tuple[str, str]]]:
        """Who recorded dispatching what (replica, action), from every day file of the interaction log."""
        found: dict[MessageKey, list[tuple[str, str]]] = defaultdict(list)
        for key in await self._backend.list(INTERACTIONS_PREFIX):
            text = await self._backend.read_text(key) or ""
            for line in text.splitlines():
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if record.get("direction") == "in" and record.get("message_id"):
                        found[
                            MessageKey(str(record.get("chat_id")), str(record["message_id"]))
                        ].append((str(record.get("replica")), str(record.get("action"))))
        return dict(found)

    async def aclose(self) -> None:
        await self._backend.aclose()
