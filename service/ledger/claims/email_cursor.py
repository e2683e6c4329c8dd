"""The shared email cursor and the pure rules over it.

Stored at ``poll_state/email_cursor.txt``: an RFC 3339 timestamp line, then the ids of the last 32
claims, newest first, one per line. The timestamp is the newest ``receivedDateTime`` any replica has
claimed; mail strictly newer than it is unclaimed. (Two mails received in the same instant on
either side of a claim are a limit of this format, inherited from the single-host system: the later
one is never pushed, but stays readable through ``read_email``.)

The claim ids let an uncertain write find itself after another replica has claimed the next window,
which is why 32 are kept rather than one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from service.clock import as_utc, format_timestamp, parse_timestamp
from service.ledger.records.reads import CorruptValueError

EMAIL_CURSOR_KEY = "poll_state/email_cursor.txt"
LEGACY_EMAIL_CURSOR_KEY = "email_cursor.txt"
CLAIM_IDS_KEPT = 32


class MailLike(Protocol):
    """What the claimer needs of a mail: its Graph id and receivedDateTime."""

    @property
    def id(self) -> str: ...

    @property
    def received_at(self) -> datetime: ...


M = TypeVar("M", bound=MailLike)


@dataclass(frozen=True)
class EmailCursor:
    ts: datetime
    claim_ids: tuple[str, ...] = ()  # newest first

    def has_claim(self, claim_id: str) -> bool:
        return claim_id in self.claim_ids


def parse_email_cursor(text: str) -> EmailCursor:
    """The cursor in ``text``; CorruptValueError when the first line is not a timestamp."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise CorruptValueError("email cursor is empty")
    try:
        ts = parse_timestamp(lines[0])
    except ValueError:
        raise CorruptValueError("email cursor does not start with an RFC 3339 timestamp") from None
    ids = lines[1:]
    if any(any(ch.isspace() for ch in claim_id) or not claim_id.isprintable() for claim_id in ids):
        raise CorruptValueError("email cursor holds a line that is not a claim id")
    return EmailCursor(ts, tuple(ids))


def render_email_cursor(cursor: EmailCursor) -> str:
    return "".join(f"{line}\n" for line in (format_timestamp(cursor.ts), *cursor.claim_ids))


def new_mail(cursor: EmailCursor, fetched: Iterable[M]) -> tuple[M, ...]:
    """The fetched mail strictly newer than the cursor, distinct by id, oldest first."""
    unique = {mail.id: mail for mail in fetched if as_utc(mail.received_at) > cursor.ts}
    return tuple(sorted(unique.values(), key=lambda mail: (as_utc(mail.received_at), mail.id)))


def advance(cursor: EmailCursor, batch: Sequence[MailLike], claim_id: str) -> EmailCursor:
    """The cursor after claiming ``batch``: its newest time, and ``claim_id`` first among the kept ids."""
    if not batch:
        raise ValueError("a claim needs at least one mail")
    newest = max(as_utc(mail.received_at) for mail in batch)
    return EmailCursor(max(cursor.ts, newest), (claim_id, *cursor.claim_ids)[:CLAIM_IDS_KEPT])


def initial_cursor(now: datetime, legacy: EmailCursor | None = None) -> EmailCursor:
    """The cursor a missing key starts from: the adopted legacy value, else ``now``."""
    return legacy if legacy is not None else EmailCursor(as_utc(now))
