"""Pure arithmetic of the conversation-mix benchmark: which change each Graph chat read was for, reads
per change by kind, and each replica count's reads per change against one replica's (reported, never
asserted).

A change is one thing that happened in a chat: a person's message, the agent's reply, or a reaction to
an earlier message. A read of a chat is put down to the latest change of that chat before it: the read
was made because of that change (or a later one of another chat, which only the order of the reads
can tell apart; the scenario leaves a gap between changes for that reason).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import unquote

from bench.stats import ratio
from emulator.stats import RequestRecord

CHAT_READ_ROUTE_PART = "/chats/{id}/messages"
BEFORE_ANY_CHANGE = (
    "before_any_change"  # a read of a chat in play before its first change (a sweep)
)
OTHER_CHATS = "other_chats"  # a read of a chat the conversation did not touch


class ChangeKind(str, Enum):
    PERSON = "person"  # a person's message: delivered once to one host
    AGENT = "agent"  # the agent's reply, posted as the agent user: delivered to nobody
    REACTION = "reaction"  # a reaction to an earlier message: Graph records it as an update of that message


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    chat_id: str
    message_id: str  # the message written, or the message reacted to
    at: float  # time.monotonic() when the emulator answered the change


@dataclass(frozen=True)
class ChatRead:
    chat_id: str
    at: float
    status: int


def chat_reads(
    records: Iterable[RequestRecord], *, since: float, until: float, humans_app: str | None
) -> list[ChatRead]:
    """Every GET of a chat's messages (the list and the newest-message read, 429s included) the fleet
    made in ``[since, until]``; the humans' requests (their own app) are not the fleet's."""
    out = []
    for r in records:
        if r.method != "GET" or CHAT_READ_ROUTE_PART not in r.route or r.app_id == humans_app:
            continue
        if since <= r.monotonic <= until:
            out.append(ChatRead(_chat_of(r.path), r.monotonic, r.status))
    return out


def _chat_of(path: str) -> str:
    # /v1.0/chats/<id>/messages[/...]: the id may come percent-encoded (Graph's SDKs encode it)
    return unquote(path.split("/chats/", 1)[1].split("/messages", 1)[0])


def attribute(changes: Sequence[Change], reads: Sequence[ChatRead]) -> dict[str, int]:
    """Reads per change kind (each read to the latest change of its chat before it), plus reads of a
    chat in play before its first change and reads of chats the conversation did not touch."""
    by_chat: dict[str, list[Change]] = {}
    for change in sorted(changes, key=lambda c: c.at):
        by_chat.setdefault(change.chat_id, []).append(change)
    counts = {kind.value: 0 for kind in ChangeKind} | {BEFORE_ANY_CHANGE: 0, OTHER_CHATS: 0}
    for read in reads:
        earlier = [c for c in by_chat.get(read.chat_id, ()) if c.at <= read.at]
        if read.chat_id not in by_chat:
            counts[OTHER_CHATS] += 1
        elif not earlier:
            counts[BEFORE_ANY_CHANGE] += 1
        else:
            counts[earlier[-1].kind.value] += 1
    return counts


def per_kind(changes: Sequence[Change]) -> dict[str, int]:
    return {kind.value: sum(1 for c in changes if c.kind is kind) for kind in ChangeKind}


def reads_per_change(reads: int, changes: int) -> float | None:
    return ratio(reads, changes, digits=3)


def growth_to_one_replica(
    rows: Sequence[Mapping[str, Any]], value: str = "reads_per_change"
) -> dict[tuple[str, int], float | None]:
    """(mode, replicas) → the row's ``value`` ÷ the same mode's 1-replica row's (None without a
    1-replica row, or when it is 0)."""
    one = {r["mode"]: r[value] for r in rows if r["replicas"] == 1}
    out: dict[tuple[str, int], float | None] = {}
    for r in rows:
        base = one.get(r["mode"])
        out[(r["mode"], r["replicas"])] = (
            None if base is None or r[value] is None else ratio(r[value], base, digits=3)
        )
    return out
