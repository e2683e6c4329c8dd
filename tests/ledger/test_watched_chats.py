"""The shared watched-chat list: fail-closed loads, merges that never remove, dirty chats retried."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from service.domain.conversation import TEAMS_CHATS
from service.ledger.fleet.local_poll_state import note_ignored_local_poll_state
from service.ledger.memory.watched_chats import WatchedChats, WatchOutcome
from service.ledger.records.reads import ReadOutcome
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.telemetry.metrics import LedgerMetrics, Metrics
from tests.ledger.ledger_helpers import RecordingBackend, sample


async def test_an_absent_list_loads_as_absent_and_a_present_one_is_learned(
    store: MemoryBackend,
) -> None:
    fresh = WatchedChats(store, metrics=LedgerMetrics())
    assert (
        await fresh.load() is ReadOutcome.ABSENT
        and fresh.chats == frozenset()
        and not fresh.needs_load
    )
    await store.write_text(TEAMS_CHATS.watched_key, "chat-a\nchat-b\n")
    assert await fresh.load() is ReadOutcome.PRESENT and fresh.chats == {"chat-a", "chat-b"}


async def test_an_unreadable_list_starts_with_no_chats_and_loads_again_later(
    store: MemoryBackend,
) -> None:
    await store.write_text(TEAMS_CHATS.watched_key, "chat-a\n")
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS, times=1))
    watched = WatchedChats(faulty, metrics=LedgerMetrics())
    assert await watched.load() is ReadOutcome.UNRESOLVED
    assert watched.chats == frozenset() and watched.needs_load
    assert await watched.load() is ReadOutcome.PRESENT and "chat-a" in watched


async def test_a_corrupt_list_is_never_overwritten_and_the_new_chat_stays_dirty(
    store: MemoryBackend,
) -> None:
    await store.write_text(TEAMS_CHATS.watched_key, "<html><body>502 Bad Gateway</body></html>\n")
    watched = WatchedChats(store, metrics=LedgerMetrics())
    assert await watched.load() is ReadOutcome.UNRESOLVED
    assert await watched.add(["chat-new"]) is WatchOutcome.FAILED
    assert watched.dirty == {"chat-new"} and "chat-new" in watched
    assert (await store.read_text(TEAMS_CHATS.watched_key) or "").startswith("<html>")


async def test_the_first_write_creates_the_list_with_if_absent_sorted_one_per_line(
    store: MemoryBackend,
) -> None:
    recording = RecordingBackend(store)
    assert (
        await WatchedChats(recording, metrics=LedgerMetrics()).add(["chat-b", "chat-a"])
        is WatchOutcome.WRITTEN
    )
    assert [(w.if_absent, w.if_match) for w in recording.writes] == [(True, None)]
    assert await store.read_text(TEAMS_CHATS.watched_key) == "chat-a\nchat-b\n"


async def test_adding_merges_and_never_removes_another_replicas_chats(store: MemoryBackend) -> None:
    await WatchedChats(store, metrics=LedgerMetrics()).add(["chat-a", "chat-b"])
    other = WatchedChats(store, metrics=LedgerMetrics())  # never loaded: knows only its own chat
    assert await other.add(["chat-c"]) is WatchOutcome.WRITTEN
    assert await store.read_text(TEAMS_CHATS.watched_key) == "chat-a\nchat-b\nchat-c\n"
    assert other.chats == {"chat-a", "chat-b", "chat-c"}


async def test_concurrent_adds_from_several_replicas_lose_no_chat(store: MemoryBackend) -> None:
    replicas = [WatchedChats(store, max_attempts=8, metrics=LedgerMetrics()) for _ in range(4)]
    outcomes = await asyncio.gather(*(r.add([f"chat-{n}"]) for n, r in enumerate(replicas)))
    assert all(o is not WatchOutcome.FAILED for o in outcomes)
    assert await store.read_text(TEAMS_CHATS.watched_key) == "".join(
        f"chat-{n}\n" for n in range(4)
    )


async def test_a_failed_write_stays_dirty_and_goes_out_with_the_next_sweep(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_FAILS))
    watched = WatchedChats(faulty, metrics=LedgerMetrics())
    assert await watched.add(["chat-a"]) is WatchOutcome.FAILED
    assert watched.dirty == {"chat-a"} and not await store.exists(TEAMS_CHATS.watched_key)
    faulty.heal()
    assert (
        await watched.add([]) is WatchOutcome.WRITTEN
    )  # the sweep had no new chat; the dirty one went out
    assert (
        watched.dirty == frozenset()
        and await store.read_text(TEAMS_CHATS.watched_key) == "chat-a\n"
    )


async def test_a_write_that_landed_without_an_answer_is_recognized_and_not_kept_dirty(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, times=1))
    watched = WatchedChats(faulty, metrics=LedgerMetrics())
    assert await watched.add(["chat-a"]) is not WatchOutcome.FAILED
    assert watched.dirty == frozenset() and faulty.injected[Fault.WRITE_RESPONSE_LOST] == 1


async def test_the_watched_gauge_follows_the_known_chats(store: MemoryBackend) -> None:
    metrics = Metrics()
    await WatchedChats(store, metrics=metrics.ledger).add(["chat-a", "chat-b"])
    assert sample(metrics, "entrabot_watched_chats") == 2


@pytest.mark.parametrize("is_cloud", [True, False])
async def test_local_poll_state_files_are_ignored_on_a_cloud_backend_with_one_info_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, is_cloud: bool
) -> None:
    (tmp_path / "watched_chats").write_text("stale-chat\n")
    (tmp_path / "email_cursor.txt").write_text("2020-01-01T00:00:00Z\n")
    with caplog.at_level(logging.INFO, logger="service.ledger.fleet.local_poll_state"):
        ignored = await note_ignored_local_poll_state(tmp_path, is_cloud=is_cloud)
    lines = [r for r in caplog.records if r.name == "service.ledger.fleet.local_poll_state"]
    if is_cloud:
        assert {p.name for p in ignored} == {"watched_chats", "email_cursor.txt"} and len(
            lines
        ) == 1
        assert lines[0].levelno == logging.INFO
    else:
        assert ignored == () and lines == []
