"""The account of a fleet run: what was sent, what the hosts received, and why anything is missing.

A pure computation over plain data, so the rule the fleet test pins is readable in one place and
tested without processes. A message is keyed by ``(chat_id, message_id)`` (Teams ids are creation
milliseconds, unique only within a chat); mail by ``("email", id)``.

Every sent message ends in exactly one group:

* delivered — some host received it (more than one push of it is a duplicate);
* lost at a SIGKILL — undelivered, sent before a SIGKILL, recorded as claimed in the shared ledger as
  read right after that kill, and sent within ``in_flight_window`` of it: a claim the killed replica
  won and never pushed (the design accepts this loss; the message stays readable through the tools);
* unexplained — anything else undelivered, which the fleet promises never happens.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from service.domain.message import EMAIL_CHAT_ID, MessageKey
from service.ledger.claims.chat_cursor import TAIL_SIZE, ChatCursor, id_order_key
from service.ledger.claims.email_cursor import EmailCursor


@dataclass(frozen=True, slots=True)
class SentMessage:
    chat_id: str  # EMAIL_CHAT_ID for mail
    message_id: str
    created: datetime  # createdDateTime for chat, receivedDateTime for mail (the ledger's times)

    @property
    def key(self) -> MessageKey:
        return MessageKey(self.chat_id, self.message_id)

    @property
    def is_mail(self) -> bool:
        return self.chat_id == EMAIL_CHAT_ID


@dataclass(frozen=True)
class LedgerSnapshot:
    """The shared ledger as read at one moment: every chat cursor and the email cursor."""

    chat_cursors: Mapping[str, ChatCursor] = field(default_factory=dict)
    email_cursor: EmailCursor | None = None

    def records_claim(self, message: SentMessage) -> bool:
        """Whether the ledger says someone claimed ``message``.

        Chat: its id is recorded, or it is older than a full tail (evicted after being recorded).
        Mail: it is not newer than the cursor. Time alone is not enough for chat: a message behind
        the watermark and never recorded was skipped, not claimed.
        """
        if message.is_mail:
            return self.email_cursor is not None and message.created <= self.email_cursor.ts
        cursor = self.chat_cursors.get(message.chat_id)
        if cursor is None:
            return False
        if cursor.is_recorded(message.message_id):
            return True
        tail = cursor.seen_ids_tail
        return (
            len(tail) >= TAIL_SIZE
            and message.message_id.isdigit()
            and tail[0].isdigit()
            and id_order_key(message.message_id) < id_order_key(tail[0])
        )


@dataclass(frozen=True)
class KillRecord:
    """A SIGKILL of one replica and the ledger read right after it."""

    replica: str
    at: datetime
    ledger: LedgerSnapshot


@dataclass(frozen=True, slots=True)
class Loss:
    message: SentMessage
    reason: str
    replica: str | None = None  # the killed replica, for a loss at a SIGKILL
    before_kill_s: float | None = None  # how long before the kill the message was sent


@dataclass(frozen=True)
class DeliveryAccount:
    sent: int
    delivered: int  # distinct sent messages some host received
    pushes: int  # every push received, duplicates included
    duplicates: Mapping[MessageKey, int]  # key -> times received, for keys received more than once
    unexpected: tuple[MessageKey, ...]  # pushed but never sent by the run
    lost_at_sigkill: tuple[Loss, ...]
    unexplained: tuple[Loss, ...]

    @property
    def lost(self) -> int:
        return len(self.lost_at_sigkill) + len(self.unexplained)


def account_deliveries(
    sent: Sequence[SentMessage],
    pushed: Iterable[tuple[str, str]],  # MessageKeys, or plain pairs a test wrote
    kills: Sequence[KillRecord],
    *,
    in_flight_window: timedelta,
) -> DeliveryAccount:
    received = Counter(MessageKey(*k) for k in pushed)
    sent_keys = {m.key for m in sent}
    lost_at_kill: list[Loss] = []
    unexplained: list[Loss] = []
    for message in sent:
        if received[message.key]:
            continue
        loss = _in_flight_at_a_kill(message, kills, in_flight_window)
        if loss is not None:
            lost_at_kill.append(loss)
        else:
            unexplained.append(Loss(message, _why_unexplained(message, kills)))
    return DeliveryAccount(
        sent=len(sent),
        delivered=sum(1 for m in sent if received[m.key]),
        pushes=sum(received.values()),
        duplicates={k: n for k, n in received.items() if n > 1},
        unexpected=tuple(sorted(k for k in received if k not in sent_keys)),
        lost_at_sigkill=tuple(lost_at_kill),
        unexplained=tuple(unexplained),
    )


def _in_flight_at_a_kill(
    message: SentMessage, kills: Sequence[KillRecord], window: timedelta
) -> Loss | None:
    for kill in kills:
        before = kill.at - message.created
        if timedelta(0) <= before <= window and kill.ledger.records_claim(message):
            return Loss(
                message,
                "claimed and not pushed when its replica was killed",
                kill.replica,
                before.total_seconds(),
            )
    return None


def _why_unexplained(message: SentMessage, kills: Sequence[KillRecord]) -> str:
    for kill in kills:
        if message.created <= kill.at and kill.ledger.records_claim(message):
            before = (kill.at - message.created).total_seconds()
            return f"claimed {before:.1f} s before {kill.replica} was killed: too early to be in flight"
    return "never delivered, and no SIGKILL explains it"
