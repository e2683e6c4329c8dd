"""The rules of a wanted read (pure): when the fleet's cursor spares a replica its Graph read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.ledger.claims.chat_cursor import ChatCursor
from service.ledger.fleet.hints import Hint
from service.workers.chat_state import ChatPhase, ChatPollState
from service.workers.chat_wants import WantedRead

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_a_preview_is_covered_only_when_the_fleets_watermark_reached_it() -> None:
    wanted = WantedRead.from_hint(Hint("c", T0, "m2", "scan"), learned_at=1.0)
    # The previewed message was claimed ahead by a sponsor wait, but an older one waits for a push
    # host: the watermark stayed before it, so the chat must still be read.
    claimed_ahead = ChatCursor(last_ts=T0 - timedelta(seconds=5), seen_ids_tail=("m2",))
    assert not wanted.covered_by_cursor(claimed_ahead)
    assert wanted.covered_by_cursor(ChatCursor(last_ts=T0, last_ts_ids=frozenset({"m2"})))


def test_a_notification_is_covered_once_its_message_is_recorded_whatever_its_time() -> None:
    wanted = WantedRead.from_hint(
        Hint("c", T0 + timedelta(hours=1), "m7", "notification"), learned_at=1.0
    )
    assert not wanted.covered_by_cursor(
        ChatCursor(last_ts=T0 + timedelta(hours=2))
    )  # its time is receipt time
    assert wanted.covered_by_cursor(ChatCursor(last_ts=T0, seen_ids_tail=("m7",)))
    state = ChatPollState("c", phase=ChatPhase.STEADY, watermark=T0 + timedelta(hours=2))
    assert not state.covers(wanted)  # no local shortcut for a notification


def test_merging_keeps_the_newest_seen_and_the_latest_learned() -> None:
    old = WantedRead.from_hint(Hint("c", T0, "m1", "scan"), learned_at=1.0)
    old.not_before = 9.0
    new = WantedRead.from_hint(Hint("c", T0 - timedelta(seconds=1), "m0", "sweep"), learned_at=5.0)
    merged = new.merged(old)
    assert (merged.newest, merged.message_id, merged.learned_at, merged.not_before) == (
        T0,
        "m1",
        5.0,
        9.0,
    )


def test_a_sweep_hint_without_a_message_is_no_preview() -> None:
    wanted = WantedRead.from_hint(Hint("c", T0, None, "sweep"), learned_at=1.0)
    assert wanted.preview_hint("c") is None and not wanted.is_preview


def test_a_sweeps_first_sight_request_is_covered_by_any_cursor_and_only_alone() -> None:
    first_sight = WantedRead.from_hint(Hint("c", T0, None, "sweep"), learned_at=1.0)
    assert first_sight.covered_by_cursor(ChatCursor())  # some replica made the first sight
    with_news = first_sight.merged(
        WantedRead.from_hint(Hint("c", T0, "m9", "notification"), learned_at=2.0)
    )
    assert not with_news.covered_by_cursor(ChatCursor())  # a message to look for came meanwhile
