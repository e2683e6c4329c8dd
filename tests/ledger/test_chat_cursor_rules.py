"""The pure chat-cursor rules: format compatibility, merge laws, what is claimable, the fleet race."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.domain.conversation import TEAMS_CHATS
from service.ledger.claims.chat_cursor import (
    TAIL_SIZE,
    Candidate,
    ChatCursor,
    ClaimMark,
    apply_claim,
    baseline_cursor,
    created_chat_cursor,
    decide_claim,
    first_watch_cursor,
    merge,
    parse_chat_cursor,
    render_chat_cursor,
)
from service.ledger.records.reads import CorruptValueError
from tests.ledger.ledger_helpers import T0, message, messages

# --- strategies: Teams-shaped messages, three per millisecond so equal timestamps happen ---


def indexed(n: int) -> Candidate:
    return Candidate(str(1_764_410_400_000 + n), T0 + timedelta(milliseconds=n // 3))


indices = st.integers(min_value=0, max_value=400)
candidate_lists = st.lists(indices.map(indexed), max_size=80)
marks = st.builds(
    ClaimMark,
    st.text("abcdef0123456789", min_size=1, max_size=6),
    st.integers(0, 10_000).map(lambda s: T0 + timedelta(seconds=s)),
)
extras = st.dictionaries(st.sampled_from(["x_note", "x_owner"]), st.integers(0, 3)).map(
    lambda d: tuple(sorted((k, json.dumps(v)) for k, v in d.items()))
)


@st.composite
def cursors(draw: st.DrawFn) -> ChatCursor:
    tail = draw(st.lists(indices, max_size=70, unique=True))
    last = draw(st.one_of(st.none(), indices))
    return ChatCursor(
        last_ts=None if last is None else indexed(last).ts,
        seen_ids_tail=tuple(indexed(i).id for i in sorted(tail)),
        bootstrapped=draw(st.booleans()),
        last_written_at=draw(st.one_of(st.none(), st.just(T0), st.just(T0 + timedelta(hours=1)))),
        # Ids recorded at the watermark are messages whose time is the watermark (three share each ms).
        last_ts_ids=frozenset()
        if last is None
        else frozenset(
            indexed(last - last % 3 + k).id for k in draw(st.lists(st.integers(0, 2), max_size=3))
        ),
        claims=tuple(draw(st.lists(marks, max_size=40))),
        any_age_id=draw(st.one_of(st.none(), indices.map(lambda i: indexed(i).id))),
        extra=draw(extras),
    )


def normalized(cursor: ChatCursor) -> ChatCursor:
    return merge(cursor, ChatCursor())


# --- format ---


def test_cursor_key_url_quotes_the_chat_id() -> None:
    assert TEAMS_CHATS.cursor_key("19:abc@thread.v2") == "chat_cursors/19%3Aabc%40thread.v2.json"
    assert TEAMS_CHATS.cursor_key("a/b") == "chat_cursors/a%2Fb.json"


def test_single_host_cursor_is_read_as_it_is() -> None:
    text = json.dumps(
        {
            "last_ts": "2026-11-29T10:00:00.1234567Z",
            "seen_ids_tail": ["1", "2"],
            "bootstrapped": True,
            "last_written_at": "2026-11-29T10:00:01+00:00",
        }
    )
    cursor = parse_chat_cursor(text)
    assert cursor.last_ts == T0 + timedelta(microseconds=123456)
    assert cursor.seen_ids_tail == ("1", "2")
    assert cursor.bootstrapped is True
    assert cursor.last_ts_ids == frozenset() and cursor.claims == ()


def test_written_cursor_keeps_the_single_host_fields_and_unknown_ones() -> None:
    stored = parse_chat_cursor(
        json.dumps({"last_ts": None, "seen_ids_tail": [], "x_future": {"a": 1}})
    )
    written = json.loads(
        render_chat_cursor(apply_claim(stored, [message(1)], claim_id="c1", now=T0))
    )
    assert {"last_ts", "seen_ids_tail", "bootstrapped", "last_written_at"} <= written.keys()
    assert written["x_future"] == {"a": 1}
    assert written["seen_ids_tail"] == [message(1).id]


@pytest.mark.parametrize(
    "text",
    [
        "<html>502</html>",
        "[]",
        json.dumps({"seen_ids_tail": []}),
        json.dumps({"last_ts": None}),
        json.dumps({"last_ts": None, "seen_ids_tail": "1,2"}),
        json.dumps({"last_ts": None, "seen_ids_tail": [1, 2]}),
        json.dumps({"last_ts": "yesterday", "seen_ids_tail": []}),
        json.dumps({"last_ts": "2026-11-29", "seen_ids_tail": []}),
        json.dumps({"last_ts": None, "seen_ids_tail": [], "bootstrapped": "yes"}),
        json.dumps({"last_ts": None, "seen_ids_tail": [], "claims": [{"token": "t"}]}),
        json.dumps({"last_ts": None, "seen_ids_tail": [], "last_ts_ids": "1"}),
        json.dumps({"last_ts": None, "seen_ids_tail": [], "last_ts_ids": ["1"]}),
        json.dumps({"last_ts": None, "seen_ids_tail": [], "any_age_id": 5}),
    ],
)
def test_wrong_shaped_cursor_is_corrupt(text: str) -> None:
    with pytest.raises(CorruptValueError):
        parse_chat_cursor(text)


@given(cursors())
def test_render_then_parse_is_identity(cursor: ChatCursor) -> None:
    assert parse_chat_cursor(render_chat_cursor(cursor)) == cursor


# --- merge laws ---


@given(cursors(), cursors())
def test_merge_is_commutative(a: ChatCursor, b: ChatCursor) -> None:
    assert merge(a, b) == merge(b, a)


@given(cursors(), cursors(), cursors())
def test_merge_is_associative(a: ChatCursor, b: ChatCursor, c: ChatCursor) -> None:
    assert merge(merge(a, b), c) == merge(a, merge(b, c))


@given(cursors(), cursors())
def test_merge_is_idempotent(a: ChatCursor, b: ChatCursor) -> None:
    once = merge(a, b)
    assert merge(once, once) == once
    assert merge(once, b) == once
    assert normalized(normalized(a)) == normalized(a)


@given(cursors(), cursors())
def test_merge_never_moves_the_watermark_back_nor_forgets_a_claim_mark_newer_than_its_oldest(
    a: ChatCursor, b: ChatCursor
) -> None:
    merged = merge(a, b)
    for side in (a, b):
        if side.last_ts is not None:
            assert merged.last_ts is not None and merged.last_ts >= side.last_ts
    if len(merged.claims) == 32:
        oldest = min(m.at for m in merged.claims)
        kept = {m.token for m in merged.claims}
        assert all(m.token in kept for m in (*a.claims, *b.claims) if m.at > oldest)


# --- deciding ---


@given(cursors(), candidate_lists)
def test_a_claim_never_returns_an_id_already_recorded(
    cursor: ChatCursor, candidates: list[Candidate]
) -> None:
    decision = decide_claim(cursor, candidates)
    for candidate in decision.claimable:
        assert not cursor.is_recorded(candidate.id)
        assert cursor.last_ts is None or candidate.ts >= cursor.last_ts
    groups = [c.id for c in decision.claimable] + list(decision.recorded) + list(decision.behind)
    assert sorted(groups) == sorted({c.id for c in candidates})


@given(cursors(), candidate_lists)
def test_after_a_claim_nothing_it_claimed_is_claimable_again(
    cursor: ChatCursor, candidates: list[Candidate]
) -> None:
    claimable = decide_claim(cursor, candidates).claimable
    if not claimable:
        return
    after = apply_claim(cursor, claimable, claim_id="mine", now=T0)
    assert decide_claim(after, candidates).claimable == ()
    assert after.has_claim("mine")


@given(cursors(), candidate_lists)
def test_a_claims_tail_never_loses_a_newer_id(
    cursor: ChatCursor, candidates: list[Candidate]
) -> None:
    claimable = decide_claim(cursor, candidates).claimable
    if not claimable:
        return
    after = apply_claim(cursor, claimable, claim_id="mine", now=T0)
    assert len(after.seen_ids_tail) <= TAIL_SIZE
    oldest_kept = min(int(i) for i in after.seen_ids_tail)
    for known in (*cursor.seen_ids_tail, *(c.id for c in claimable)):
        if int(known) > oldest_kept:
            assert known in after.seen_ids_tail


def test_a_burst_over_50_is_claimed_whole_and_older_ids_stay_claimed_through_the_watermark() -> (
    None
):
    burst = messages(1, 120)
    decision = decide_claim(None, burst)
    assert len(decision.claimable) == 120
    after = apply_claim(None, decision.claimable, claim_id="c", now=T0)
    assert after.seen_ids_tail == tuple(c.id for c in burst[-50:])
    assert after.last_ts == burst[-1].ts
    again = decide_claim(after, burst)
    assert again.claimable == ()
    assert len(again.behind) == 70 and len(again.recorded) == 50


def test_an_older_message_missing_from_the_tail_is_behind_not_claimable() -> None:
    cursor = apply_claim(None, messages(5, 9), claim_id="c", now=T0)
    assert decide_claim(cursor, [message(3)]).behind == (message(3).id,)


def test_an_unclaimed_message_with_the_watermarks_exact_time_stays_claimable() -> None:
    first = Candidate("1764410400001", T0)
    twin = Candidate("1764410400002", T0)  # same millisecond, reached this replica later
    cursor = apply_claim(None, [first], claim_id="c", now=T0)
    assert decide_claim(cursor, [first, twin]).claimable == (twin,)


def test_equal_time_ids_stay_recorded_after_a_burst_pushes_them_out_of_the_tail() -> None:
    same_ms = [Candidate(str(1_764_410_400_000 + n), T0) for n in range(60)]
    cursor = apply_claim(None, same_ms, claim_id="c", now=T0)
    assert same_ms[0].id not in cursor.seen_ids_tail
    assert decide_claim(cursor, same_ms).claimable == ()


def test_single_host_cursor_guards_equal_times_by_its_tail() -> None:
    legacy = ChatCursor(last_ts=T0, seen_ids_tail=("1764410400001",))
    twin = Candidate("1764410400002", T0)
    assert decide_claim(legacy, [Candidate("1764410400001", T0), twin]).claimable == (twin,)


def test_seen_up_to_moves_the_watermark_past_filtered_messages_but_not_past_their_twins() -> None:
    own_message_ts = T0 + timedelta(seconds=5)
    cursor = apply_claim(None, [message(1)], claim_id="c", now=T0, seen_up_to=own_message_ts)
    assert cursor.last_ts == own_message_ts
    assert decide_claim(cursor, [Candidate("x-human", own_message_ts)]).claimable != ()
    assert decide_claim(cursor, [message(2)]).behind == (message(2).id,)


def test_our_claim_mark_is_the_newest_even_when_our_clock_lags() -> None:
    ahead = [ClaimMark(f"other{n}", T0 + timedelta(hours=1, seconds=n)) for n in range(32)]
    cursor = ChatCursor(claims=tuple(sorted(ahead, key=lambda m: m.at, reverse=True)))
    after = apply_claim(cursor, [message(1)], claim_id="mine", now=T0)
    assert after.claims[0].token == "mine" and len(after.claims) == 32


def test_duplicate_candidates_count_once() -> None:
    decision = decide_claim(None, [message(1), message(1), message(2)])
    assert [c.id for c in decision.claimable] == [message(1).id, message(2).id]


def test_baseline_marks_every_seen_message_without_a_claim_mark() -> None:
    cursor = baseline_cursor(messages(1, 3), now=T0)
    assert cursor.bootstrapped and cursor.claims == ()
    assert decide_claim(cursor, messages(1, 4)).claimable == (message(4),)


def test_a_first_watch_makes_history_behind_and_later_messages_new() -> None:
    cursor = first_watch_cursor(message(3), now=T0, surface_newest=False)
    assert cursor.bootstrapped and cursor.claims == () and cursor.any_age_id is None
    decision = decide_claim(cursor, messages(1, 5))
    assert decision.claimable == (message(4), message(5)) and decision.recorded == (message(3).id,)
    assert decision.behind == (message(1).id, message(2).id)


def test_a_first_watch_of_a_fresh_newest_leaves_it_claimable_and_nothing_older() -> None:
    cursor = first_watch_cursor(message(3), now=T0, surface_newest=True)
    decision = decide_claim(cursor, messages(1, 4))
    assert decision.claimable == (message(3), message(4))
    assert decision.behind == (message(1).id, message(2).id)
    assert cursor.any_age_id is None  # under the age bound, unlike create_chat's newest


def test_a_first_watch_of_an_empty_chat_takes_its_first_message() -> None:
    cursor = first_watch_cursor(None, now=T0, surface_newest=True)
    assert cursor.last_ts is None and decide_claim(cursor, messages(1, 2)).claimable == (
        message(1),
        message(2),
    )


def test_create_chats_newest_is_named_for_the_age_bound_and_the_name_survives_claims() -> None:
    cursor = created_chat_cursor(message(3), now=T0)
    assert cursor.any_age_id == message(3).id
    claimed = apply_claim(cursor, [message(3), message(4)], claim_id="c1", now=T0)
    assert claimed.any_age_id == message(3).id
    assert parse_chat_cursor(render_chat_cursor(claimed)).any_age_id == message(3).id
    assert "any_age_id" not in json.loads(render_chat_cursor(baseline_cursor([], now=T0)))


# --- the fleet race, on the pure core ---


@dataclass
class Replica:
    watermark: int = 0
    snapshot: tuple[ChatCursor | None, int] | None = None
    candidates: list[Candidate] = field(default_factory=list)


@dataclass
class Store:
    cursor: ChatCursor | None = None
    version: int = 0


def _read(replica: Replica, store: Store, everything: list[Candidate], visible: int) -> None:
    replica.snapshot = (store.cursor, store.version)
    replica.candidates = everything[replica.watermark : visible]


def _write(
    replica: Replica, store: Store, owners: dict[str, list[int]], who: int, visible_at_read: int
) -> None:
    """One compare-and-swap of a replica's claim; the watermark moves only when every candidate is decided."""
    if replica.snapshot is None:
        return
    cursor, version = replica.snapshot
    replica.snapshot = None
    claimable = decide_claim(cursor, replica.candidates).claimable
    if claimable:
        if version != store.version:
            return  # lost the race: nothing decided, candidates stay
        store.cursor = apply_claim(cursor, claimable, claim_id=f"{who}-{version}", now=T0)
        store.version += 1
        for candidate in claimable:
            owners.setdefault(candidate.id, []).append(who)
    replica.watermark = visible_at_read


actions = st.lists(
    st.tuples(st.sampled_from(["reveal", "read", "write"]), st.integers(0, 3), st.integers(1, 80)),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(actions, st.integers(50, 220))
def test_racing_replicas_claim_every_message_exactly_once(
    steps: list[tuple[str, int, int]], total: int
) -> None:
    everything = [indexed(n) for n in range(total)]
    store = Store()
    replicas = [Replica() for _ in range(4)]
    read_at = [0] * 4
    owners: dict[str, list[int]] = {}
    visible = 0
    for action, who, size in steps:
        if action == "reveal":
            visible = min(total, visible + size)
        elif action == "read":
            _read(replicas[who], store, everything, visible)
            read_at[who] = visible
        else:
            _write(replicas[who], store, owners, who, read_at[who])
    for _round in range(total + 10):  # quiesce: everything visible, replicas take turns
        for who, replica in enumerate(replicas):
            _read(replica, store, everything, total)
            _write(replica, store, owners, who, total)
        if all(r.watermark == total for r in replicas):
            break
    assert all(len(claimers) == 1 for claimers in owners.values())
    assert set(owners) == {c.id for c in everything}


def test_claim_contribution_refuses_an_empty_claim() -> None:
    with pytest.raises(ValueError):
        apply_claim(None, [], claim_id="c", now=T0)


# --- claims ahead of the watermark (a sponsor's reply behind a message another replica must deliver) ---


def test_a_claim_ahead_of_the_watermark_leaves_the_skipped_older_message_claimable() -> None:
    cursor = apply_claim(None, messages(1, 5), claim_id="a", now=T0)
    blocked, reply = message(7), message(9)
    ahead = apply_claim(
        cursor, [reply], claim_id="b", now=T0, seen_up_to=message(6).ts, advance=False
    )
    assert ahead.last_ts == message(6).ts
    decision = decide_claim(ahead, [blocked, reply])
    assert decision.claimable == (blocked,) and decision.recorded == (reply.id,)


def test_ids_claimed_ahead_of_a_stalled_watermark_outlive_the_50_id_tail() -> None:
    cursor = apply_claim(None, [message(1)], claim_id="a", now=T0)
    replies = messages(3, 3 + TAIL_SIZE + 20)
    ahead = apply_claim(
        cursor, replies, claim_id="b", now=T0, seen_up_to=message(1).ts, advance=False
    )
    assert len(ahead.seen_ids_tail) == TAIL_SIZE + 21
    decision = decide_claim(ahead, [message(2), *replies])
    assert decision.claimable == (message(2),) and len(decision.recorded) == len(replies)
    # once the watermark catches up, the tail shrinks back to the newest 50
    caught_up = apply_claim(ahead, [message(2)], claim_id="c", now=T0, seen_up_to=replies[-1].ts)
    assert len(caught_up.seen_ids_tail) == TAIL_SIZE


@given(st.text(min_size=1, max_size=60))
def test_a_cursor_key_names_its_chat_back(chat_id: str) -> None:
    assert TEAMS_CHATS.conversation_of_cursor_key(TEAMS_CHATS.cursor_key(chat_id)) == chat_id


def test_keys_that_are_not_cursors_name_no_chat() -> None:
    for key in (
        "chat_cursors/",
        "chat_cursors/.json",
        "watched_chats",
        "hints/20261201T2200.jsonl",
        "chat_cursors/19%3Aa%40thread.v2.txt",
        "chat_cursors/19:a@thread.v2.json",
    ):
        assert TEAMS_CHATS.conversation_of_cursor_key(key) is None
