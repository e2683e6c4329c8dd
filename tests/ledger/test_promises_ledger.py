"""The promises ledger: last line per id wins, compare-and-swap writes, compaction, corrupt lines kept."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from service.ledger.memory.promises import (
    PROMISES_KEY,
    Promise,
    PromiseLedger,
    PromiseStatus,
    PromiseWriteOutcome,
    compact,
    fold_promises,
    fold_readable,
    render_promises,
)
from service.ledger.records.reads import CorruptValueError, ReadOutcome
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.telemetry.metrics import LedgerMetrics
from tests.ledger.ledger_helpers import T0, FakeClock, RecordingBackend


def record(pid: str, status: str = "open", **fields: object) -> str:
    obj = {
        "id": pid,
        "text": f"promise {pid}",
        "status": status,
        "created_at": "2026-11-20T09:00:00Z",
        **fields,
    }
    return json.dumps(obj) + "\n"


def test_the_last_line_per_id_wins() -> None:
    text = record("a") + record("b") + record("a", "resolved", resolved_at="2026-11-21T09:00:00Z")
    folded = {p.id: p for p in fold_promises(text)}
    assert folded["a"].status is PromiseStatus.RESOLVED and folded["b"].status is PromiseStatus.OPEN


def test_compaction_keeps_open_promises_and_recent_resolutions_only() -> None:
    promises = fold_promises(
        record("open")
        + record("recent", "resolved", resolved_at=(T0 - timedelta(days=13)).isoformat())
        + record("old", "resolved", resolved_at=(T0 - timedelta(days=15)).isoformat())
    )
    assert [p.id for p in compact(promises, now=T0)] == ["open", "recent"]


def test_a_line_that_is_not_a_record_is_corrupt_for_writes_and_skipped_for_reads() -> None:
    text = record("a") + "{not json\n" + record("b")
    with pytest.raises(CorruptValueError, match="line 2"):
        fold_promises(text)
    promises, skipped = fold_readable(text)
    assert [p.id for p in promises] == ["a", "b"] and skipped == 1


def test_unknown_fields_survive_a_rewrite() -> None:
    (promise,) = fold_promises(record("a", x_priority=3))
    assert json.loads(render_promises([promise]))["x_priority"] == 3


async def test_a_promise_is_added_listed_and_resolved(
    store: MemoryBackend, clock: FakeClock
) -> None:
    ledger = PromiseLedger(store, clock=clock, metrics=LedgerMetrics())
    added = await ledger.add("send the report", chat_id="chat-1", to="ana@example.com")
    assert added.outcome is PromiseWriteOutcome.WRITTEN and added.promise is not None
    listed = await ledger.list(status=PromiseStatus.OPEN)
    assert listed.outcome is ReadOutcome.PRESENT and [p.text for p in listed.promises] == [
        "send the report"
    ]
    clock.advance(hours=2)
    resolved = await ledger.resolve(added.promise.id, resolution="sent")
    assert resolved.promise is not None and resolved.promise.resolved_at == clock()
    assert (await ledger.list(status=PromiseStatus.OPEN)).promises == ()


async def test_writes_are_compare_and_swap_including_the_first(store: MemoryBackend) -> None:
    recording = RecordingBackend(store)
    ledger = PromiseLedger(recording, metrics=LedgerMetrics())
    await ledger.add("one")
    await ledger.add("two")
    assert [(w.if_absent, w.if_match is not None) for w in recording.writes] == [
        (True, False),
        (False, True),
    ]


async def test_resolving_an_unknown_promise_is_not_found_and_twice_changes_nothing(
    store: MemoryBackend, clock: FakeClock
) -> None:
    ledger = PromiseLedger(store, clock=clock, metrics=LedgerMetrics())
    assert (await ledger.resolve("missing")).outcome is PromiseWriteOutcome.NOT_FOUND
    added = await ledger.add("x")
    assert added.promise is not None
    first = await ledger.resolve(added.promise.id)
    clock.advance(hours=1)
    second = await ledger.resolve(added.promise.id)
    assert second.outcome is PromiseWriteOutcome.WRITTEN and second.promise == first.promise


class SiblingWritesFirst:
    """Another replica adds a promise just before each of our writes (``times`` times)."""

    def __init__(self, inner: MemoryBackend, times: int) -> None:
        self.inner = inner
        self.left = times

    def __getattr__(self, name: str):  # noqa: ANN204 - forwards the rest of the protocol
        return getattr(self.inner, name)

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        if self.left > 0:
            self.left -= 1
            current, etag = await self.inner.read_text_with_etag(key)
            sibling = (current or "") + record(f"sibling-{self.left}")
            if etag is None:
                await self.inner.write_text(key, sibling, if_absent=True)
            else:
                await self.inner.write_text(key, sibling, if_match=etag)
        return await self.inner.write_text(key, content, if_match=if_match, if_absent=if_absent)


async def test_a_conflict_is_retried_once_and_both_promises_survive(
    store: MemoryBackend, clock: FakeClock
) -> None:
    ledger = PromiseLedger(SiblingWritesFirst(store, times=1), clock=clock, metrics=LedgerMetrics())
    assert (await ledger.add("mine")).outcome is PromiseWriteOutcome.WRITTEN
    texts = {p.text for p in fold_promises(await store.read_text(PROMISES_KEY) or "")}
    assert texts == {"mine", "promise sibling-0"}


async def test_a_second_conflict_gives_up_without_writing(store: MemoryBackend) -> None:
    ledger = PromiseLedger(SiblingWritesFirst(store, times=2), metrics=LedgerMetrics())
    assert (await ledger.add("mine")).outcome is PromiseWriteOutcome.CONFLICTED
    assert "mine" not in {p.text for p in fold_promises(await store.read_text(PROMISES_KEY) or "")}


async def test_a_corrupt_line_blocks_writes_instead_of_being_dropped(store: MemoryBackend) -> None:
    await store.write_text(PROMISES_KEY, record("a") + "{not json\n")
    ledger = PromiseLedger(store, metrics=LedgerMetrics())
    assert (await ledger.add("b")).outcome is PromiseWriteOutcome.UNRESOLVED
    assert await store.read_text(PROMISES_KEY) == record("a") + "{not json\n"
    listed = await ledger.list()
    assert [p.id for p in listed.promises] == ["a"] and listed.skipped_lines == 1


async def test_every_write_compacts_old_resolutions_away(
    store: MemoryBackend, clock: FakeClock
) -> None:
    old = (T0 - timedelta(days=20)).isoformat()
    await store.write_text(
        PROMISES_KEY, record("old", "resolved", resolved_at=old) + record("open")
    )
    await PromiseLedger(store, clock=clock, metrics=LedgerMetrics()).add("new")
    kept = fold_promises(await store.read_text(PROMISES_KEY) or "")
    assert [p.text for p in kept] == ["promise open", "new"]


async def test_an_add_that_landed_without_an_answer_is_written_once(store: MemoryBackend) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, times=1))
    added = await PromiseLedger(faulty, metrics=LedgerMetrics()).add("once")
    assert added.outcome is PromiseWriteOutcome.WRITTEN
    assert [p.text for p in fold_promises(await store.read_text(PROMISES_KEY) or "")] == ["once"]


async def test_an_unreadable_ledger_lists_as_unresolved(store: MemoryBackend) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS))
    assert (
        await PromiseLedger(faulty, metrics=LedgerMetrics()).list()
    ).outcome is ReadOutcome.UNRESOLVED
    assert (
        await PromiseLedger(faulty, metrics=LedgerMetrics()).add("x")
    ).outcome is PromiseWriteOutcome.UNRESOLVED


def test_promises_compare_by_value_after_a_round_trip() -> None:
    promise = Promise("p", "t", T0)
    assert fold_promises(render_promises([promise])) == (promise,)
