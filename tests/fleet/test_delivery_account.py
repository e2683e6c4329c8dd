"""The accounting rule of the fleet test: which undelivered message a SIGKILL explains, and which it does not."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from service.devstack.delivery_account import (
    KillRecord,
    LedgerSnapshot,
    SentMessage,
    account_deliveries,
)
from service.ledger.claims.chat_cursor import TAIL_SIZE, ChatCursor
from service.ledger.claims.email_cursor import EmailCursor

KILL_AT = datetime(2026, 11, 29, 10, 0, 0, tzinfo=timezone.utc)
WINDOW = timedelta(seconds=15)


def chat(
    message_id: int, seconds_before_kill: float, chat_id: str = "19:a@thread.v2"
) -> SentMessage:
    return SentMessage(chat_id, str(message_id), KILL_AT - timedelta(seconds=seconds_before_kill))


def mail(mail_id: str, seconds_before_kill: float) -> SentMessage:
    return SentMessage("email", mail_id, KILL_AT - timedelta(seconds=seconds_before_kill))


def kill_with(
    cursors: dict[str, ChatCursor] | None = None, email_ts: datetime | None = None
) -> KillRecord:
    email = EmailCursor(email_ts) if email_ts is not None else None
    return KillRecord("replica-1", KILL_AT, LedgerSnapshot(cursors or {}, email))


def test_every_push_of_one_message_beyond_the_first_is_a_duplicate() -> None:
    a, b = chat(1, 30), chat(2, 20)
    account = account_deliveries(
        [a, b], [a.key, b.key, a.key, ("19:x", "9")], [], in_flight_window=WINDOW
    )
    assert account.delivered == 2 and account.pushes == 4
    assert account.duplicates == {a.key: 2}
    assert account.unexpected == (("19:x", "9"),)
    assert account.lost == 0


def test_an_undelivered_message_claimed_just_before_a_kill_is_lost_at_that_kill() -> None:
    claimed = chat(101, 3)
    cursor = ChatCursor(last_ts=claimed.created, seen_ids_tail=("100", "101"))
    account = account_deliveries(
        [claimed], [], [kill_with({claimed.chat_id: cursor})], in_flight_window=WINDOW
    )
    assert [
        (loss.message, loss.replica, loss.before_kill_s) for loss in account.lost_at_sigkill
    ] == [(claimed, "replica-1", 3.0)]
    assert account.unexplained == ()


def test_an_undelivered_message_the_ledger_never_recorded_is_unexplained_even_behind_the_watermark() -> (
    None
):
    skipped = chat(100, 5)
    cursor = ChatCursor(last_ts=KILL_AT - timedelta(seconds=1), seen_ids_tail=("99", "101"))
    account = account_deliveries(
        [skipped], [], [kill_with({skipped.chat_id: cursor})], in_flight_window=WINDOW
    )
    assert account.lost_at_sigkill == ()
    assert [loss.message for loss in account.unexplained] == [skipped]


def test_an_id_older_than_a_full_tail_counts_as_recorded() -> None:
    evicted = chat(1000, 2)
    tail = tuple(str(2000 + i) for i in range(TAIL_SIZE))
    cursor = ChatCursor(last_ts=KILL_AT, seen_ids_tail=tail)
    account = account_deliveries(
        [evicted], [], [kill_with({evicted.chat_id: cursor})], in_flight_window=WINDOW
    )
    assert len(account.lost_at_sigkill) == 1


def test_a_claim_made_long_before_the_kill_was_not_in_flight() -> None:
    old = chat(7, 60)
    cursor = ChatCursor(last_ts=old.created, seen_ids_tail=("7",))
    account = account_deliveries(
        [old], [], [kill_with({old.chat_id: cursor})], in_flight_window=WINDOW
    )
    assert account.lost_at_sigkill == ()
    assert "too early to be in flight" in account.unexplained[0].reason


def test_a_message_sent_after_the_kill_is_never_explained_by_it() -> None:
    later = chat(8, -2)
    cursor = ChatCursor(last_ts=later.created, seen_ids_tail=("8",))
    account = account_deliveries(
        [later], [], [kill_with({later.chat_id: cursor})], in_flight_window=WINDOW
    )
    assert account.lost_at_sigkill == () and len(account.unexplained) == 1


def test_mail_counts_as_claimed_up_to_the_email_cursor_and_not_beyond() -> None:
    taken, beyond = mail("AAMk1", 6), mail("AAMk2", 1)
    kill = kill_with(email_ts=KILL_AT - timedelta(seconds=5))
    account = account_deliveries([taken, beyond], [], [kill], in_flight_window=WINDOW)
    assert [loss.message for loss in account.lost_at_sigkill] == [taken]
    assert [loss.message for loss in account.unexplained] == [beyond]


def test_without_any_kill_every_undelivered_message_is_unexplained() -> None:
    account = account_deliveries([chat(1, 1), mail("AAMk3", 1)], [], [], in_flight_window=WINDOW)
    assert account.lost_at_sigkill == () and len(account.unexplained) == 2
