"""Migrated logs stay appendable: the day of the migration logs its later interactions (issue 24, item 6).

The service's own interaction log writes after ``migrate`` and reads everything back. On Blob
(Azurite) a log is an append blob for that; a day file written whole (a block blob: the single-host
system's, or an earlier ``migrate``'s) still takes records, by compare-and-swap, and running
``migrate`` again recreates it appendable when the local copy holds all its lines.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from service.ledger.fleet.hints import segment_key
from service.ledger.memory.interactions import (
    Action,
    Channel,
    Direction,
    Interaction,
    InteractionLog,
    InteractionQuery,
    interaction_key,
    render_interaction,
)
from service.notifications.lifecycle_log import LIFECYCLE_KEY
from service.storage.backend import MemoryBackend
from service.storage.blob import BlobBackend
from service.storage.errors import ConcurrencyError
from service.storage.faults import Fault, FaultRule, FaultyBackend, Op
from service.storage.log_append import log_lines
from service.storage.log_migration import (
    LogCopyAction,
    append_batches,
    is_append_log,
    plan_log_copy,
)
from service.storage.migration import migrate_local_to_backend

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)
DAY_KEY = interaction_key(T0.date())


def record(minutes: int, message_id: str) -> Interaction:
    return Interaction(
        ts=T0 + timedelta(minutes=minutes),
        direction=Direction.IN,
        channel=Channel.CHAT,
        action=Action.DELIVERED.value,
        chat_id="19:a@thread.v2",
        message_id=message_id,
    )


def local_day(tmp_path: Path, *message_ids: str) -> Path:
    """A data directory holding the day's log with one record per id, a minute apart."""
    source = tmp_path / "data"
    (source / "interactions").mkdir(parents=True)
    (source / DAY_KEY).write_text(
        "".join(render_interaction(record(n, m)) for n, m in enumerate(message_ids))
    )
    return source


async def logged_ids(store: MemoryBackend) -> list[str | None]:
    read = await InteractionLog(store, clock=lambda: T0 + timedelta(hours=2)).read(
        InteractionQuery(since=T0)
    )
    assert read.skipped_lines == 0 and read.unresolved_days == ()
    return [r.message_id for r in read.records]


async def test_the_migrated_days_log_takes_that_days_later_interactions(target, tmp_path):
    source = local_day(tmp_path, "before-1", "before-2")

    report = await migrate_local_to_backend([(source, "")], target)
    logged = await InteractionLog(target).record(record(30, "after-migrate"))

    assert report.copied == [DAY_KEY] and report.ok
    assert logged
    assert await logged_ids(target) == ["before-1", "before-2", "after-migrate"]


async def test_a_log_a_replica_started_before_the_migration_gets_the_local_lines_too(
    target, tmp_path
):
    source = local_day(tmp_path, "before-1", "before-2")
    assert await InteractionLog(target).record(record(30, "replica-first"))

    report = await migrate_local_to_backend([(source, "")], target)
    again = await migrate_local_to_backend([(source, "")], target)

    assert report.repaired == [DAY_KEY] and report.ok
    assert again.skipped == [DAY_KEY] and not again.repaired
    assert await logged_ids(target) == ["before-1", "before-2", "replica-first"]


@pytest.mark.azurite
async def test_a_log_an_earlier_migrate_wrote_whole_is_recreated_appendable_by_migrating_again(
    blob_backend: BlobBackend, tmp_path: Path
):
    source = local_day(tmp_path, "before-1", "before-2")
    await blob_backend.write_text(
        DAY_KEY, (source / DAY_KEY).read_text(), if_absent=True
    )  # the old migrate

    report = await migrate_local_to_backend([(source, "")], blob_backend)
    logged = await InteractionLog(blob_backend).record(record(31, "after-the-repair"))

    assert report.repaired == [DAY_KEY] and report.ok
    assert await blob_backend.accepts_appends(DAY_KEY)
    assert logged
    assert await logged_ids(blob_backend) == ["before-1", "before-2", "after-the-repair"]


@pytest.mark.azurite
async def test_a_day_file_stored_whole_takes_records_by_compare_and_swap_each_once(
    blob_backend: BlobBackend,
):
    # What the single-host system's Blob backend left (its append read the file and wrote it back
    # whole), and what an earlier migrate left: a block blob, which refuses appends.
    await blob_backend.write_text(
        DAY_KEY,
        json.dumps(
            {  # in the single-host shape (single_host_records)
                "id": "0b6f",
                "ts": T0.isoformat(),
                "channel": "teams_dm",
                "direction": "inbound",
                "sender": "Ada",
                "summary": "hi",
                "content_ref": "single-host",
            }
        )
        + "\n",
    )
    logs = [InteractionLog(blob_backend) for _ in range(3)]  # three replicas

    logged = await asyncio.gather(
        *(logs[n % 3].record(record(1 + n, f"replica-{n}")) for n in range(6))
    )

    assert all(logged)
    assert await logged_ids(blob_backend) == ["single-host", *(f"replica-{n}" for n in range(6))]
    assert not await blob_backend.accepts_appends(
        DAY_KEY
    )  # until its day ends; tomorrow's file appends


@pytest.mark.azurite
async def test_a_rewrite_whose_answer_was_lost_is_not_written_twice(blob_backend: BlobBackend):
    await blob_backend.write_text(DAY_KEY, render_interaction(record(0, "single-host")))
    faulty = FaultyBackend(blob_backend)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, ops=frozenset({Op.WRITE}), times=1))

    assert await InteractionLog(faulty).record(record(1, "answer-lost"))

    assert await logged_ids(blob_backend) == ["single-host", "answer-lost"]


@pytest.mark.azurite
async def test_a_whole_stored_log_the_service_extended_gets_the_local_lines_and_keeps_its_own(
    blob_backend: BlobBackend, tmp_path: Path
):
    source = local_day(tmp_path, "before-1", "before-2")
    await blob_backend.write_text(
        DAY_KEY, (source / DAY_KEY).read_text().splitlines(keepends=True)[0]
    )
    assert await InteractionLog(blob_backend).record(record(30, "logged-meanwhile"))

    report = await migrate_local_to_backend([(source, "")], blob_backend)

    # Recreating it could lose the line only the cloud holds: the local line is added by compare-and-swap.
    assert report.repaired == [DAY_KEY] and report.ok
    assert await logged_ids(blob_backend) == ["before-1", "before-2", "logged-meanwhile"]


@pytest.mark.azurite
async def test_a_conversion_cut_short_after_the_recreate_is_completed_by_the_next_run(
    blob_backend: BlobBackend, tmp_path: Path
):
    source = local_day(tmp_path, "before-1", "before-2")
    etag = await blob_backend.write_text(DAY_KEY, (source / DAY_KEY).read_text())
    await blob_backend.recreate_appendable(DAY_KEY, if_match=etag)  # then the process died

    report = await migrate_local_to_backend([(source, "")], blob_backend)

    assert report.repaired == [DAY_KEY] and report.ok
    assert await logged_ids(blob_backend) == ["before-1", "before-2"]


@pytest.mark.azurite
async def test_the_recreate_refuses_a_log_that_changed_since_it_was_read(blob_backend: BlobBackend):
    stale = await blob_backend.write_text(DAY_KEY, "one\n")
    await blob_backend.write_text(DAY_KEY, "one\ntwo\n", if_match=stale)

    with pytest.raises(ConcurrencyError):
        await blob_backend.recreate_appendable(DAY_KEY, if_match=stale)

    assert await blob_backend.read_text(DAY_KEY) == "one\ntwo\n"


@pytest.mark.azurite
async def test_a_dry_run_reports_the_repair_and_changes_nothing(
    blob_backend: BlobBackend, tmp_path: Path
):
    source = local_day(tmp_path, "before-1")
    await blob_backend.write_text(DAY_KEY, (source / DAY_KEY).read_text())

    report = await migrate_local_to_backend([(source, "")], blob_backend, dry_run=True)

    assert report.repaired == [DAY_KEY]
    assert "would repair 1" in report.summary(dry_run=True)
    assert not await blob_backend.accepts_appends(DAY_KEY)


def test_every_log_the_service_appends_to_is_migrated_as_a_log() -> None:
    for key in (interaction_key(T0.date()), segment_key(T0), LIFECYCLE_KEY):
        assert is_append_log(key, ""), key
    assert not is_append_log("promises.jsonl", "")  # compare-and-swap, written whole
    assert not is_append_log(DAY_KEY, "claude_memory/")  # under a prefix it is a persona file


@pytest.mark.parametrize(
    ("local", "stored", "appendable", "action", "lines"),
    [
        ("a\nb\n", None, True, LogCopyAction.CREATE, ("a\n", "b\n")),
        ("a\nb\n", "b\nz\n", True, LogCopyAction.APPEND, ("a\n",)),
        ("a\nb\n", "a\nb\n", True, LogCopyAction.NOTHING, ()),
        ("a\nb\n", "a\n", False, LogCopyAction.CONVERT, ("a\n", "b\n")),
        ("a\nb\n", "a\nz\n", False, LogCopyAction.APPEND, ("b\n",)),  # z only in the cloud: kept
        ("a\n", "a\nz\n", False, LogCopyAction.NOTHING, ()),
        (
            "a\n\nb",
            "",
            True,
            LogCopyAction.APPEND,
            ("a\n", "b\n"),
        ),  # a torn last line gets its newline
    ],
)
def test_the_copy_plan(local, stored, appendable, action, lines) -> None:
    plan = plan_log_copy(local, stored, appendable=appendable)
    assert (plan.action, plan.lines) == (action, lines)


def test_appends_are_whole_lines_within_the_limit() -> None:
    lines = log_lines("".join(f"{n:03d}\n" for n in range(10)))
    batches = list(append_batches(lines, limit=12))
    assert "".join(batches) == "".join(lines)
    assert all(len(b.encode()) <= 12 and b.endswith("\n") for b in batches)
    assert list(append_batches(["x" * 20 + "\n"], limit=12)) == ["x" * 20 + "\n"]
