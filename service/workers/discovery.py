"""Discovery: the agent user's chats from ``GET /me/chats``, merged into the shared watched list.

Agent-user mode only (in delegated mode ``/me/chats`` is the human's). One sweep walks up to 20
pages; pages fetched before a failure are kept; all new chats plus any whose earlier write failed go
to the shared list in one merge. Also keeps the SponsorGate's view of chat members current.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from service.delivery.sponsor_directory import read_sponsors
from service.delivery.sponsors import SponsorGate
from service.graph.client import GraphClient
from service.graph.errors import GraphError
from service.ledger import ReadOutcome, WatchedChats, WatchOutcome

log = logging.getLogger(__name__)

MAX_DISCOVERY_PAGES = 20


@dataclass
class Discovery:
    graph: GraphClient
    watched: WatchedChats
    gate: SponsorGate
    agent_identity_id: str | None = None
    # The agent identity's app-only client: Graph lists sponsors to no delegated token (see
    # service.delivery.sponsor_directory). Without it, no sponsor is ever recognised.
    directory: GraphClient | None = None
    _sponsors_loaded: bool = False

    async def cycle(self) -> None:
        # Re-read the shared list every sweep: siblings add chats (create_chat) between sweeps.
        if await self.watched.load() is ReadOutcome.UNRESOLVED:
            log.warning("watched chat list unreadable; discovery will merge into it next sweep")
        await self._load_sponsors()
        try:
            sweep = await self.graph.list_my_chats(max_pages=MAX_DISCOVERY_PAGES)
        except GraphError as exc:
            log.warning("chat discovery failed on its first page", extra={"error": type(exc).__name__,
                                                                            "status": exc.status})
            await self._flush_dirty()
            return
        if not sweep.complete:
            log.warning("chat discovery incomplete; keeping the %d chats read", len(sweep.chats))
        known = self.watched.chats
        for chat in sweep.chats:
            if chat.members:
                self.gate.refresh_chat(chat.id, chat.members)
        new = [chat.id for chat in sweep.chats if chat.id not in known]
        outcome = await self.watched.add(new)
        if new:
            log.info("discovered chats", extra={"new": len(new), "outcome": outcome.value})

    async def register_chat(self, chat_id: str) -> WatchOutcome:
        """A chat created by a tool: watched at once, its members learnt for the sponsor gate."""
        outcome = await self.watched.add([chat_id])
        try:
            self.gate.refresh_chat(chat_id, await self.graph.list_chat_members(chat_id))
        except GraphError:
            log.warning("members of a new chat unreadable; the next sweep learns them", extra={"chat_id": chat_id})
        return outcome

    async def _flush_dirty(self) -> None:
        if self.watched.dirty:
            await self.watched.add()

    async def _load_sponsors(self) -> None:
        if self._sponsors_loaded or not self.agent_identity_id:
            return
        if self.directory is None:
            log.warning("sponsors unreadable: no app-only Graph client for the agent identity; sponsor waits "
                        "cannot be satisfied")
            return
        try:
            read = await read_sponsors(self.directory, self.graph, self.agent_identity_id)
        except GraphError as exc:
            log.warning("sponsors unreadable; sponsor waits cannot be satisfied until they load",
                        extra={"error": type(exc).__name__, "status": exc.status})
            return
        self.gate.replace_sponsors(read.sponsors)
        # An incomplete read (a profile unreadable) is used as it is and read again next sweep.
        self._sponsors_loaded = read.complete
