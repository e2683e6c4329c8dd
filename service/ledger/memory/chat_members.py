"""The shared snapshot of each watched chat's members, for every replica's SponsorGate.

Only the discovery lease holder walks ``GET /me/chats?$expand=members``; every other replica learns the
members from this one blob instead of walking Graph itself, so the fleet's Graph load does not grow
with its replica count. A replica that creates a chat (``create_chat``) adds that chat's members too.

Key ``watched/members.json``::

    {"chats": {"<chat id>": [{"user_id": "...", "email": "...", "tenant_id": "..."}, ...]}}

Only what the gate matches on: the member's object id, address and tenant (never a display name or a
message). The snapshot is a cache of what Graph says, not a ledger: it is written only when a merge
changes it, always with If-Match (``if_absent`` the first time); a chat's members are replaced as a
whole by a fresher read, and chats are never removed (the watched list only grows). A snapshot that
does not parse is unknown members (the gate learns nothing from it; logged once), and its writer
replaces it with If-Match on the corrupt blob's ETag: it holds nothing Graph cannot tell again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from service.ledger.records.fields import load_object, optional_str
from service.ledger.records.reads import CorruptValueError
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError
from service.telemetry.metrics import LedgerMetrics

log = logging.getLogger(__name__)

CHAT_MEMBERS_KEY = "watched/members.json"
MAX_ATTEMPTS = 4
_WHAT = "chat members snapshot"


@dataclass(frozen=True, slots=True)
class KnownMember:
    """A chat member as the gate reads it (fits ``service.domain.sponsors.ChatMemberView``)."""

    user_id: str | None
    email: str | None = None
    tenant_id: str | None = None


ChatMembersMap = Mapping[str, tuple[KnownMember, ...]]


class MemberFields(Protocol):
    """What is kept of a Graph chat member (``service.graph.models.ChatMember`` fits)."""

    @property
    def user_id(self) -> str | None: ...

    @property
    def email(self) -> str | None: ...

    @property
    def tenant_id(self) -> str | None: ...


def known_members(members: Iterable[MemberFields]) -> tuple[KnownMember, ...]:
    """The gate's fields of Graph's chat members; a member without an object id never matches, so it is dropped."""
    return tuple(KnownMember(m.user_id, m.email, m.tenant_id) for m in members if m.user_id)


def parse_chat_members(text: str) -> dict[str, tuple[KnownMember, ...]]:
    obj = load_object(text, _WHAT)
    chats = obj.get("chats")
    if not isinstance(chats, dict):
        raise CorruptValueError(f"{_WHAT}: field 'chats' must be an object")
    parsed: dict[str, tuple[KnownMember, ...]] = {}
    for chat_id, entries in chats.items():
        if not chat_id or not isinstance(entries, list):
            raise CorruptValueError(f"{_WHAT}: each chat must map to a list of members")
        members: list[KnownMember] = []
        for entry in entries:
            if not isinstance(entry, dict):
                raise CorruptValueError(f"{_WHAT}: a member must be an object")
            user_id = optional_str(entry, "user_id", _WHAT)
            if not user_id:
                raise CorruptValueError(f"{_WHAT}: a member needs its user_id")
            members.append(
                KnownMember(
                    user_id,
                    optional_str(entry, "email", _WHAT),
                    optional_str(entry, "tenant_id", _WHAT),
                )
            )
        parsed[chat_id] = tuple(members)
    return parsed


def render_chat_members(chats: ChatMembersMap) -> str:
    def entry(m: KnownMember) -> dict[str, str]:
        return {
            name: value
            for name, value in (
                ("user_id", m.user_id),
                ("email", m.email),
                ("tenant_id", m.tenant_id),
            )
            if value is not None
        }

    return json.dumps(
        {"chats": {chat_id: [entry(m) for m in chats[chat_id]] for chat_id in sorted(chats)}},
        sort_keys=True,
        separators=(",", ":"),
    )


def merge_chat_members(
    current: ChatMembersMap, fresher: ChatMembersMap
) -> dict[str, tuple[KnownMember, ...]] | None:
    """``current`` with each chat of ``fresher`` replaced; None when that changes nothing (pure)."""
    if all(current.get(chat_id) == members for chat_id, members in fresher.items()):
        return None
    return {**current, **fresher}


class SnapshotLoad(str, Enum):
    """What one read of the snapshot told this replica."""

    CHANGED = "changed"  # a new version, parsed: the gate learns it
    UNCHANGED = "unchanged"  # the version this replica already learnt (same ETag): nothing parsed
    ABSENT = "absent"  # no snapshot yet (no holder has walked, or nothing was ever written)
    CORRUPT = "corrupt"  # does not parse: unknown members, the gate keeps what it knew
    UNREADABLE = "unreadable"  # the read failed: tried again next time


class SnapshotWrite(str, Enum):
    WRITTEN = "written"
    UNCHANGED = "unchanged"  # the stored snapshot already said so
    FAILED = (
        "failed"  # unreadable, or every attempt lost a race or failed: a later merge carries it
    )


@dataclass
class ChatMembers:
    """This replica's reads and merges of the shared members snapshot."""

    backend: MemoryBackend
    metrics: LedgerMetrics
    max_attempts: int = MAX_ATTEMPTS
    chats: dict[str, tuple[KnownMember, ...]] = field(default_factory=dict)  # as last loaded
    _etag: str | None = None  # the version ``chats`` was loaded from
    _corrupt_etag: str | None = None  # the corrupt version already logged

    async def load(self) -> SnapshotLoad:
        """Read the snapshot (one blob read); parse it only when its ETag is not the one last learnt."""
        try:
            text, etag = await self.backend.read_text_with_etag(CHAT_MEMBERS_KEY)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the members stay as last learnt
            log.warning(
                "chat members snapshot unreadable; keeping the members last learnt",
                extra={"error": type(exc).__name__},
            )
            return self._count_load(SnapshotLoad.UNREADABLE)
        if text is None:
            return self._count_load(SnapshotLoad.ABSENT)
        if etag is not None and etag == self._etag:
            return self._count_load(SnapshotLoad.UNCHANGED)
        try:
            if etag is None:
                raise CorruptValueError(f"{_WHAT} came back without an ETag")
            chats = parse_chat_members(text)
        except CorruptValueError as exc:
            self._note_corrupt(etag, str(exc))
            return self._count_load(SnapshotLoad.CORRUPT)
        self.chats, self._etag, self._corrupt_etag = chats, etag, None
        self._publish()
        return self._count_load(SnapshotLoad.CHANGED)

    async def merge(self, fresher: ChatMembersMap) -> SnapshotWrite:
        """Replace the members of the chats in ``fresher`` in the stored snapshot, under compare-and-swap."""
        if not fresher:
            return SnapshotWrite.UNCHANGED
        for _ in range(self.max_attempts):
            try:
                text, etag = await self.backend.read_text_with_etag(CHAT_MEMBERS_KEY)
            except Exception as exc:  # noqa: BLE001 - unknown store state: write nothing this time
                log.warning(
                    "chat members snapshot unreadable; not merged",
                    extra={"error": type(exc).__name__},
                )
                return self._count_write(SnapshotWrite.FAILED)
            if text is not None and etag is None:
                log.warning("chat members snapshot came back without an ETag; not merged")
                return self._count_write(SnapshotWrite.FAILED)
            current = self._parsed_or_empty(text, etag)
            merged = merge_chat_members(current, fresher)
            if merged is None:
                return self._count_write(SnapshotWrite.UNCHANGED)
            content = render_chat_members(merged)
            try:
                if text is None:
                    await self.backend.write_text(CHAT_MEMBERS_KEY, content, if_absent=True)
                else:
                    await self.backend.write_text(CHAT_MEMBERS_KEY, content, if_match=etag)
            except ConcurrencyError:
                self.metrics.cas_conflicts.labels(ledger="chat_members").inc()
                continue
            except StorageError as exc:
                # Maybe landed: the next attempt reads back and finds the change holding, or retries it.
                log.warning(
                    "chat members snapshot write outcome unknown",
                    extra={"error": type(exc).__name__},
                )
                continue
            # Not learnt here: ``load`` learns the new version, so the gate sees every chat in it.
            return self._count_write(SnapshotWrite.WRITTEN)
        log.warning("chat members snapshot not merged after %d attempts", self.max_attempts)
        return self._count_write(SnapshotWrite.FAILED)

    def _parsed_or_empty(
        self, text: str | None, etag: str | None
    ) -> dict[str, tuple[KnownMember, ...]]:
        """What the writer merges into: a corrupt snapshot holds nothing Graph cannot tell again, so the
        writer replaces it (If-Match on its ETag) rather than leave the fleet without members for good."""
        if text is None:
            return {}
        try:
            return parse_chat_members(text)
        except CorruptValueError as exc:
            self._note_corrupt(etag, f"{exc}; replacing it with the members read now")
            return {}

    def _note_corrupt(self, etag: str | None, why: str) -> None:
        if etag is None or etag != self._corrupt_etag:  # once per corrupt version, not every cycle
            log.warning("chat members snapshot is corrupt (%s); its members count as unknown", why)
            self._corrupt_etag = etag

    def _publish(self) -> None:
        self.metrics.chat_members_snapshot_chats.set(len(self.chats))

    def _count_load(self, outcome: SnapshotLoad) -> SnapshotLoad:
        self.metrics.chat_members_snapshot_reads.labels(outcome=outcome.value).inc()
        return outcome

    def _count_write(self, outcome: SnapshotWrite) -> SnapshotWrite:
        self.metrics.chat_members_snapshot_writes.labels(outcome=outcome.value).inc()
        return outcome
