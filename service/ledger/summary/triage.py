"""The daily summary's triage: what needs a sponsor, what the agent handled, what to keep an eye on.

Pure functions over the day's interaction records and the promises ledger; the rules are stated in
``service.ledger.summary.daily``'s docstring. Every line is built from ids, counts, times and the
agent's own promise texts, never from what someone else wrote: the summary is mailed, and a body in it
would carry another person's words (and any instruction hidden in them) to the sponsors' inboxes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from service.clock import format_timestamp
from service.ledger.memory.interactions import Action, Channel, Direction, Interaction
from service.ledger.memory.promises import Promise, PromiseStatus

DUE_SOON = timedelta(hours=24)
MAX_LISTED = 10  # lines of one rule before the rest are counted
_QUOTE_CHARS = 200


class Section(str, Enum):
    NEEDS_YOU = "needs_you"
    HANDLED = "handled"
    HEADS_UP = "heads_up"


@dataclass(frozen=True)
class TriageItem:
    section: Section
    rule: str
    text: str

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "text": self.text}


@dataclass(frozen=True)
class Triage:
    items: tuple[TriageItem, ...] = ()

    def of(self, section: Section) -> tuple[TriageItem, ...]:
        return tuple(i for i in self.items if i.section is section)

    def to_json(self) -> dict[str, list[dict[str, str]]]:
        return {s.value: [i.to_json() for i in self.of(s)] for s in Section}


def triage(
    records: Sequence[Interaction],
    promises: Iterable[Promise],
    *,
    start: datetime,
    end: datetime,
    skipped_lines: int = 0,
) -> Triage:
    """The triage of the day [start, end): ``records`` are that day's, ``promises`` the whole ledger."""
    listed = list(promises)
    return Triage(
        (
            *_needs_you(records, listed, end),
            *_handled(records, listed, start, end),
            *_heads_up(records, listed, end, skipped_lines),
        )
    )


def _needs_you(
    records: Sequence[Interaction], promises: list[Promise], end: datetime
) -> list[TriageItem]:
    items = [
        TriageItem(Section.NEEDS_YOU, "send_unconfirmed", _unconfirmed(r))
        for r in records
        if r.direction is Direction.OUT and r.action == Action.SEND_UNCONFIRMED.value
    ]
    overdue = sorted(
        (p for p in _open(promises) if p.due_at is not None and p.due_at < end),
        key=lambda p: p.due_at or end,
    )
    items += _capped(
        Section.NEEDS_YOU,
        "promise_overdue",
        [f"Overdue since {format_timestamp(p.due_at)}: {_promise(p)}" for p in overdue if p.due_at],
    )
    return items


def _handled(
    records: Sequence[Interaction], promises: list[Promise], start: datetime, end: datetime
) -> list[TriageItem]:
    items: list[TriageItem] = []
    inbound = [r for r in records if r.direction is Direction.IN]
    if inbound:
        chats = {r.chat_id for r in inbound if r.channel is Channel.CHAT and r.chat_id}
        channels = [r.chat_id for r in inbound if r.channel is Channel.TEAM_CHANNEL and r.chat_id]
        mails = sum(1 for r in inbound if r.channel is Channel.EMAIL)
        in_channels = (
            f"{len(channels)} in {len(set(channels))} team channel(s), " if channels else ""
        )
        items.append(
            TriageItem(
                Section.HANDLED,
                "received",
                f"{len(inbound)} message(s) reached the agent: {len(inbound) - mails - len(channels)} "
                f"in {len(chats)} chat(s), {in_channels}{mails} mail(s)",
            )
        )
    done = Counter(
        r.action
        for r in records
        if r.direction is Direction.OUT and r.action != Action.SEND_UNCONFIRMED.value
    )
    if done:
        counted = ", ".join(
            f"{action} {n}" for action, n in sorted(done.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        items.append(TriageItem(Section.HANDLED, "actions", f"What the agent did: {counted}"))
    kept = [p for p in promises if p.resolved_at is not None and start <= p.resolved_at < end]
    items += _capped(Section.HANDLED, "promise_kept", [f"Kept: {_promise(p)}" for p in kept])
    return items


def _heads_up(
    records: Sequence[Interaction], promises: list[Promise], end: datetime, skipped_lines: int
) -> list[TriageItem]:
    soon = sorted(
        (p for p in _open(promises) if p.due_at is not None and end <= p.due_at < end + DUE_SOON),
        key=lambda p: p.due_at or end,
    )
    items = _capped(
        Section.HEADS_UP,
        "promise_due_soon",
        [f"Due by {format_timestamp(p.due_at)}: {_promise(p)}" for p in soon if p.due_at],
    )
    undated = [p for p in _open(promises) if p.due_at is None and p.created_at < end]
    items += _capped(
        Section.HEADS_UP, "promise_open", [f"Open, no due date: {_promise(p)}" for p in undated]
    )
    waiting = _unanswered_chats(records)
    items += _capped(
        Section.HEADS_UP,
        "unanswered",
        [
            f"{'Team channel' if '/' in chat else 'Chat'} {chat}: {n} message(s) after the agent "
            "last wrote there"
            for chat, n in waiting
        ],
    )
    asked = sum(1 for r in records if r.action == Action.PERMISSION_ASKED.value)
    relayed = sum(1 for r in records if r.action == Action.VERDICT_RELAYED.value)
    if asked > relayed:
        items.append(
            TriageItem(
                Section.HEADS_UP,
                "permission_unanswered",
                f"{asked - relayed} of {asked} permission request(s) got no verdict from a sponsor",
            )
        )
    if skipped_lines:
        items.append(
            TriageItem(
                Section.HEADS_UP,
                "unreadable_log",
                f"{skipped_lines} line(s) of the day's interaction log could not be read",
            )
        )
    return items


def _open(promises: Iterable[Promise]) -> list[Promise]:
    return [p for p in promises if p.status is PromiseStatus.OPEN]


def _promise(p: Promise) -> str:
    text = " ".join(p.text.split())
    quoted = text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 1] + "…"
    to = f", to {p.to}" if p.to else ""
    return f"\u201c{quoted}\u201d (promise {p.id}{to})"


def _unconfirmed(record: Interaction) -> str:
    at = format_timestamp(record.ts)
    if record.channel is Channel.EMAIL:
        return (
            f"A mail the agent sent at {at} may or may not have gone out (Graph lost its answer and Sent Items "
            "could not tell): check the agent's Sent Items before anyone sends it again"
        )
    return (
        f"A message the agent posted at {at} in chat {record.chat_id} may or may not be there (Graph lost its "
        "answer and reading the chat could not tell): check that chat"
    )


def _unanswered_chats(records: Sequence[Interaction]) -> list[tuple[str, int]]:
    """Chats and team channels (``<team id>/<channel id>``) whose latest records are messages to the
    agent after its last message there, with their count."""
    waiting: dict[str, int] = {}
    conversations = (Channel.CHAT, Channel.TEAM_CHANNEL)
    for r in sorted(
        (r for r in records if r.channel in conversations and r.chat_id), key=lambda r: r.ts
    ):
        assert r.chat_id is not None
        if r.direction is Direction.OUT:
            waiting.pop(r.chat_id, None)
        else:
            waiting[r.chat_id] = waiting.get(r.chat_id, 0) + 1
    return sorted(waiting.items(), key=lambda kv: (-kv[1], kv[0]))


def _capped(section: Section, rule: str, lines: list[str]) -> list[TriageItem]:
    items = [TriageItem(section, rule, line) for line in lines[:MAX_LISTED]]
    if len(lines) > MAX_LISTED:
        items.append(TriageItem(section, rule, f"and {len(lines) - MAX_LISTED} more"))
    return items
