"""LocalBackend rules that come from living in a directory tree rather than a flat Blob namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.storage.errors import StorageError
from service.storage.keys import InvalidKeyError
from service.storage.local import LocalBackend


@pytest.mark.parametrize("key", [".locks/abc.lock", ".tmp/x", ".singleton.lock"])
async def test_housekeeping_names_at_the_root_are_not_keys(tmp_path: Path, key: str) -> None:
    backend = LocalBackend(tmp_path)
    with pytest.raises(InvalidKeyError, match="reserved"):
        await backend.write_text(key, "x")
    with pytest.raises(InvalidKeyError):
        await backend.read_text(key)


async def test_housekeeping_entries_are_never_listed(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    await backend.write_text("chat_cursors/a.json", "{}")  # creates .locks and .tmp
    (tmp_path / ".singleton.lock").write_text("4242")
    assert {p.name for p in tmp_path.iterdir()} >= {".locks", ".tmp", ".singleton.lock"}
    assert await backend.list() == ["chat_cursors/a.json"]


async def test_a_name_that_is_a_directory_reads_as_absent(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    await backend.write_text("interactions/2026-04-17.jsonl", "x\n")
    assert await backend.read_text_with_etag("interactions") == (None, None)
    assert await backend.exists("interactions") is False


async def test_a_write_the_disk_refuses_is_a_storage_error(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    await backend.write_text("watched_chats", "a\n")
    with pytest.raises(StorageError, match="write of 'watched_chats/x' under"):
        await backend.write_text(
            "watched_chats/x", "b"
        )  # a file stands where a directory is needed
    with pytest.raises(StorageError):
        await backend.append_text("watched_chats/x", "b")
    assert await backend.read_text("watched_chats") == "a\n"
