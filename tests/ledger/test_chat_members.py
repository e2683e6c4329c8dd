"""The shared chat members snapshot: strict parsing, merges that write only a change, a reader that
parses only a new version, and a corrupt or ETag-less snapshot that is never taken for members."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.ledger.memory.chat_members import (
    CHAT_MEMBERS_KEY,
    ChatMembers,
    KnownMember,
    SnapshotLoad,
    SnapshotWrite,
    merge_chat_members,
    parse_chat_members,
    render_chat_members,
)
from service.ledger.records.reads import CorruptValueError
from service.storage.local import LocalBackend
from service.telemetry.metrics import LedgerMetrics

ADA = KnownMember("u-ada", "ada@contoso.example", "t-1")
GRACE = KnownMember("u-grace", None, None)


def test_a_snapshot_round_trips_and_omits_unknown_fields() -> None:
    chats = {"19:b": (GRACE,), "19:a": (ADA, GRACE)}
    text = render_chat_members(chats)
    assert parse_chat_members(text) == chats
    assert "null" not in text and text.index("19:a") < text.index("19:b")


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"chats": []}',
        '{"chats": {"19:a": {}}}',
        '{"chats": {"19:a": ["u-ada"]}}',
        '{"chats": {"19:a": [{"email": "a@b.c"}]}}',
        '{"chats": {"19:a": [{"user_id": "u", "email": 3}]}}',
    ],
)
def test_anything_but_the_snapshot_shape_is_corrupt(text: str) -> None:
    with pytest.raises(CorruptValueError):
        parse_chat_members(text)


def test_a_merge_replaces_a_chats_members_whole_and_keeps_other_chats() -> None:
    current = {"19:a": (ADA, GRACE), "19:b": (GRACE,)}
    assert merge_chat_members(current, {"19:a": (ADA, GRACE)}) is None
    assert merge_chat_members(current, {"19:a": (ADA,)}) == {"19:a": (ADA,), "19:b": (GRACE,)}


async def test_a_reader_parses_only_a_new_version_and_a_merge_writes_only_a_change(
    tmp_path: Path,
) -> None:
    backend = LocalBackend(tmp_path)
    writer, reader = (
        ChatMembers(backend, metrics=LedgerMetrics()),
        ChatMembers(backend, metrics=LedgerMetrics()),
    )
    assert await reader.load() is SnapshotLoad.ABSENT
    assert await writer.merge({"19:a": (ADA,)}) is SnapshotWrite.WRITTEN
    assert await reader.load() is SnapshotLoad.CHANGED and reader.chats == {"19:a": (ADA,)}
    assert await reader.load() is SnapshotLoad.UNCHANGED
    _, etag = await backend.read_text_with_etag(CHAT_MEMBERS_KEY)
    assert await writer.merge({"19:a": (ADA,)}) is SnapshotWrite.UNCHANGED
    assert (await backend.read_text_with_etag(CHAT_MEMBERS_KEY))[1] == etag
    assert await writer.merge({"19:b": (GRACE,)}) is SnapshotWrite.WRITTEN
    assert await reader.load() is SnapshotLoad.CHANGED and set(reader.chats) == {"19:a", "19:b"}


async def test_a_corrupt_snapshot_leaves_the_members_last_loaded(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    reader = ChatMembers(backend, metrics=LedgerMetrics())
    await ChatMembers(backend, metrics=LedgerMetrics()).merge({"19:a": (ADA,)})
    await reader.load()
    await backend.write_text(CHAT_MEMBERS_KEY, "<html>proxy error</html>")
    assert await reader.load() is SnapshotLoad.CORRUPT
    assert reader.chats == {"19:a": (ADA,)}


class NoEtagBackend(LocalBackend):
    """A store (or a proxy in front of one) that answers a value without its ETag."""

    async def read_text_with_etag(self, key: str) -> tuple[str | None, str | None]:
        text, _ = await super().read_text_with_etag(key)
        return text, None


async def test_a_snapshot_without_an_etag_is_neither_learnt_nor_overwritten(tmp_path: Path) -> None:
    await ChatMembers(LocalBackend(tmp_path), metrics=LedgerMetrics()).merge({"19:a": (ADA,)})
    backend = NoEtagBackend(tmp_path)
    members = ChatMembers(backend, metrics=LedgerMetrics())
    assert await members.load() is SnapshotLoad.CORRUPT and members.chats == {}
    assert await members.merge({"19:b": (GRACE,)}) is SnapshotWrite.FAILED
    assert parse_chat_members(await backend.read_text(CHAT_MEMBERS_KEY) or "") == {"19:a": (ADA,)}
