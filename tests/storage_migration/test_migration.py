"""migrate_local_to_backend: copy, never delete; idempotent; poll state stays behind; per-file errors.

Every test that takes ``target`` runs twice: against LocalBackend and against BlobBackend on Azurite.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from service.storage.backend import MemoryBackend
from service.storage.local import LocalBackend
from service.storage.migration import is_excluded, migrate_local_to_backend

AGENT_STATE = {
    "interactions/2026-04-17.jsonl": '{"id": 1}\n{"id": 2}\n',
    "promises.jsonl": '{"id": "p1", "text": "call back"}\n',
    "summaries/2026-04-17.html": "<p>day</p>",
    "poll_state/other.txt": "kept: only the email cursor is poll state",
    "sub/watched_chats": "kept: the exclusions match at the root only",
    "chat_cursors_backup.json": "kept: not under chat_cursors/",
}
POLL_STATE = {
    "poll_state/email_cursor.txt": "2026-04-17T00:00:00Z\nid1\n",
    "email_cursor.txt": "2026-01-01T00:00:00Z",
    "watched_chats": "19:a@thread.v2\n",
    "chat_id": "19:a@thread.v2",
    "chat_cursors/19%3Aa%40thread.v2.json": '{"last_ts": null}',
    "chat_cursors/nested/deeper.json": "{}",
}
LOCK_FILES = {
    ".singleton.lock": "",
    "state.lock": "",
    "sub/dir/other.lock": "",
    ".locks/0123abcd.lock": "",
    ".locks/not-a-lock-name": "",
    ".tmp/tmpk2j3h4": "half a write",
}


async def test_every_file_is_copied_and_the_source_is_left_untouched(
    target, tmp_path, write_tree, snapshot, store_contents
):
    source = tmp_path / "data"
    write_tree(source, AGENT_STATE)
    before = snapshot(source)

    report = await migrate_local_to_backend([(source, "")], target)

    assert report.copied == sorted(AGENT_STATE)
    assert report.ok and not report.skipped and not report.excluded
    assert await store_contents(target) == AGENT_STATE
    assert snapshot(source) == before


async def test_rerun_copies_nothing_and_skips_every_key(target, tmp_path, write_tree):
    source = tmp_path / "data"
    write_tree(source, AGENT_STATE)
    await migrate_local_to_backend([(source, "")], target)

    again = await migrate_local_to_backend([(source, "")], target)

    assert again.copied == []
    assert again.skipped == sorted(AGENT_STATE)
    assert again.ok


async def test_key_present_at_the_target_is_skipped_and_keeps_its_content(
    target, tmp_path, write_tree
):
    source = tmp_path / "data"
    write_tree(source, {"promises.jsonl": "local, older", "notes.md": "new"})
    await target.write_text("promises.jsonl", "cloud, newer")

    report = await migrate_local_to_backend([(source, "")], target)

    assert report.skipped == ["promises.jsonl"] and report.copied == ["notes.md"]
    assert await target.read_text("promises.jsonl") == "cloud, newer"


class WriterRacingTheListing:
    """A target where another replica creates ``key`` just after the migration listed the store."""

    def __init__(self, inner: MemoryBackend, key: str, content: str) -> None:
        self._inner, self._key, self._content = inner, key, content

    async def list(self, prefix: str = "") -> list[str]:
        keys = await self._inner.list(prefix)
        await self._inner.write_text(self._key, self._content, if_absent=True)
        return keys

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


async def test_racing_writer_is_never_overwritten_and_counts_as_skipped(
    target, tmp_path, write_tree
):
    source = tmp_path / "data"
    write_tree(source, {"promises.jsonl": "from the migration", "notes.md": "n"})
    racing = WriterRacingTheListing(target, "promises.jsonl", "from a live replica")

    report = await migrate_local_to_backend([(source, "")], racing)

    assert report.skipped == ["promises.jsonl"] and report.copied == ["notes.md"]
    assert report.ok
    assert await target.read_text("promises.jsonl") == "from a live replica"


async def test_root_level_poll_state_is_not_copied(target, tmp_path, write_tree, store_contents):
    source = tmp_path / "data"
    write_tree(source, {**AGENT_STATE, **POLL_STATE})

    report = await migrate_local_to_backend([(source, "")], target)

    assert report.excluded == sorted(POLL_STATE)
    assert report.copied == sorted(AGENT_STATE)
    assert sorted(await store_contents(target)) == sorted(AGENT_STATE)
    assert all((source / rel).is_file() for rel in POLL_STATE)


async def test_poll_state_names_under_a_prefix_are_ordinary_files_and_copied(
    target, tmp_path, write_tree, store_contents
):
    persona = tmp_path / "memory"
    write_tree(persona, POLL_STATE)

    report = await migrate_local_to_backend([(persona, "claude_memory/")], target)

    expected = {f"claude_memory/{rel}": content for rel, content in POLL_STATE.items()}
    assert report.copied == sorted(expected) and not report.excluded
    assert await store_contents(target) == expected


@pytest.mark.parametrize("prefix", ["", "claude_memory/"])
async def test_lock_files_are_never_copied_under_any_prefix(target, tmp_path, write_tree, prefix):
    source = tmp_path / "data"
    write_tree(source, {**LOCK_FILES, "notes.lockfile": "kept: not a .lock name"})

    report = await migrate_local_to_backend([(source, prefix)], target)

    assert report.excluded == sorted(prefix + rel for rel in LOCK_FILES)
    assert report.copied == [prefix + "notes.lockfile"]
    assert await target.list("") == [prefix + "notes.lockfile"]


async def test_missing_source_root_is_skipped_silently(target, tmp_path, write_tree):
    present = tmp_path / "data"
    write_tree(present, {"promises.jsonl": "p"})

    report = await migrate_local_to_backend(
        [(tmp_path / "no-such-dir", "claude_memory/"), (present, "")], target
    )

    assert report.copied == ["promises.jsonl"]
    assert report.ok and not report.errors


def make_invalid_utf8(path: Path) -> None:
    # The store's contract is text (write_text takes str); a binary file dropped into the state
    # directory cannot be copied as text. Tests run as root, for whom chmod 000 blocks nothing.
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")


def make_fifo(path: Path) -> None:
    # A named pipe is not a regular file; a naive open() would wait forever for a writer.
    os.mkfifo(path)


@pytest.mark.parametrize(
    ("make_unreadable", "reason"),
    [(make_invalid_utf8, "not UTF-8 text"), (make_fifo, "not a regular file")],
)
async def test_unreadable_file_is_reported_and_the_rest_is_still_copied(
    target, tmp_path, write_tree, make_unreadable, reason
):
    source = tmp_path / "data"
    write_tree(source, {"a.md": "a", "z.md": "z"})
    make_unreadable(source / "m.bin")

    report = await migrate_local_to_backend([(source, "")], target)

    assert [key for key, _ in report.errors] == ["m.bin"]
    assert reason in report.errors[0][1]
    assert report.copied == ["a.md", "z.md"]
    assert not report.ok
    assert await target.list("") == ["a.md", "z.md"]


async def test_file_whose_name_is_not_a_valid_key_is_reported_and_the_rest_is_copied(
    target, tmp_path, write_tree
):
    source = tmp_path / "data"
    write_tree(source, {"ok.md": "fine", "back\\slash.md": "a legal Linux name, not a key"})

    report = await migrate_local_to_backend([(source, "")], target)

    assert [key for key, _ in report.errors] == ["back\\slash.md"]
    assert report.copied == ["ok.md"]


async def test_symlinks_out_of_the_root_are_rejected_and_never_read(
    target, tmp_path, outside, write_tree, store_contents
):
    source = tmp_path / "data"
    write_tree(source, {"real.md": "real"})
    (source / "leak.txt").symlink_to(outside / "secret.txt")
    (source / "leakdir").symlink_to(outside)
    (source / "alias.md").symlink_to(source / "real.md")  # stays inside: followed
    (source / "aliasdir").symlink_to(source)  # stays inside: its files are copied under real paths

    report = await migrate_local_to_backend([(source, "")], target)

    assert [key for key, _ in report.rejected] == ["leak.txt", "leakdir"]
    assert report.copied == ["alias.md", "real.md"]
    assert not report.ok
    assert "do not copy" not in (await store_contents(target)).values()


async def test_dry_run_reads_every_file_and_writes_nothing(target, tmp_path, write_tree):
    source = tmp_path / "data"
    write_tree(source, {**AGENT_STATE, "bad.bin": b"\xff\xff"})
    await target.write_text("promises.jsonl", "already there")

    report = await migrate_local_to_backend([(source, "")], target, dry_run=True)

    assert report.copied == sorted(set(AGENT_STATE) - {"promises.jsonl"})
    assert report.skipped == ["promises.jsonl"]
    assert [key for key, _ in report.errors] == ["bad.bin"]
    assert await target.list("") == ["promises.jsonl"]


async def test_two_sources_mapping_to_one_key_first_source_wins(target, tmp_path, write_tree):
    data, persona = tmp_path / "data", tmp_path / "memory"
    write_tree(data, {"claude_memory/profile.md": "from the data dir"})
    write_tree(persona, {"profile.md": "from the persona dir"})

    report = await migrate_local_to_backend([(data, ""), (persona, "claude_memory/")], target)

    assert report.copied == ["claude_memory/profile.md"]
    assert report.skipped == ["claude_memory/profile.md"]
    assert await target.read_text("claude_memory/profile.md") == "from the data dir"


async def test_progress_reports_each_copied_file_once_up_to_the_total(target, tmp_path, write_tree):
    source = tmp_path / "data"
    write_tree(source, {**AGENT_STATE, **POLL_STATE})
    calls: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        calls.append((done, total))

    await migrate_local_to_backend([(source, "")], target, progress=progress)

    total = len(AGENT_STATE)  # excluded files are not work
    assert calls == [(done, total) for done in range(total + 1)]


class PeakWrites:
    """Counts writes in flight; the first ``hold`` writes wait until ``hold`` are in flight together."""

    def __init__(self, inner: MemoryBackend, hold: int) -> None:
        self._inner, self._hold = inner, hold
        self.in_flight = self.peak = 0
        self._gate = asyncio.Event()

    async def write_text(self, key: str, content: str, **conditions) -> str:
        return await self._held(self._inner.write_text(key, content, **conditions))

    async def append_text(self, key: str, content: str) -> None:
        await self._held(self._inner.append_text(key, content))  # how logs are copied

    async def _held(self, write):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self._hold:
            self._gate.set()
        try:
            await self._gate.wait()
            return await write
        finally:
            self.in_flight -= 1

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


async def test_copies_run_sixteen_at_a_time_and_never_more(tmp_path, write_tree):
    source = tmp_path / "data"
    files = {f"interactions/{n:04d}.jsonl": f"{n}\n" for n in range(200)}
    write_tree(source, files)
    store = PeakWrites(LocalBackend(tmp_path / "store"), hold=16)

    # The first 16 writes block until 16 are in flight: a copy with less concurrency never finishes.
    async with asyncio.timeout(60):
        report = await migrate_local_to_backend([(source, "")], store, concurrency=16)

    assert store.peak == 16
    assert len(report.copied) == 200


@pytest.mark.parametrize(
    ("rel", "prefix", "excluded"),
    [
        ("watched_chats", "", True),
        ("watched_chats", "claude_memory/", False),
        ("chat_cursors/x.json", "", True),
        ("poll_state/email_cursor.txt", "", True),
        ("poll_state/email_cursor.txt.bak", "", False),
        ("x/.singleton.lock", "claude_memory/", True),
        (".tmp/abc", "claude_memory/", True),
        ("notes/.tmp/abc", "", False),
    ],
)
def test_exclusion_rule(rel, prefix, excluded):
    assert is_excluded(rel, prefix) is excluded
