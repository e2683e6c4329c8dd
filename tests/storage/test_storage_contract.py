"""The MemoryBackend contract (SPEC §3), run against LocalBackend and against BlobBackend on Azurite."""

from __future__ import annotations

import asyncio

import pytest
from azure.storage.blob.aio import ContainerClient

from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError
from service.storage.keys import InvalidKeyError

ODD_KEYS = [
    "chat_cursors/19%3Ameeting_abc%40thread.v2.json",  # url-quoted chat id, '%' kept literally
    "odd/a b:c@d.txt",
    "odd/100% sure @ 10:30",
]
INVALID_KEYS = [
    "..",
    "../escape",
    "a/../../b",
    "/absolute",
    "a//b",
    "a/",
    "",
    ".",
    "./a",
    "a/./b",
    "a/.",
    "a/..",
]


async def test_absent_key_reads_as_none_and_does_not_exist(backend: MemoryBackend) -> None:
    assert await backend.read_text("missing.txt") is None
    assert await backend.read_text_with_etag("missing.txt") == (None, None)
    assert await backend.exists("missing.txt") is False
    assert await backend.list() == []


async def test_written_key_reads_back_with_the_etag_the_write_returned(
    backend: MemoryBackend,
) -> None:
    etag = await backend.write_text("promises.jsonl", '{"id": 1}\n')
    assert await backend.read_text("promises.jsonl") == '{"id": 1}\n'
    assert await backend.read_text_with_etag("promises.jsonl") == ('{"id": 1}\n', etag)
    assert await backend.exists("promises.jsonl") is True


async def test_etag_is_a_quoted_opaque_string(backend: MemoryBackend) -> None:
    etag = await backend.write_text("k", "v")
    assert len(etag) > 2 and etag.startswith('"') and etag.endswith('"')


async def test_etag_is_stable_across_reads_and_changed_by_a_write(backend: MemoryBackend) -> None:
    first = await backend.write_text("cursor.json", "1")
    assert (await backend.read_text_with_etag("cursor.json"))[1] == first
    assert (await backend.read_text_with_etag("cursor.json"))[1] == first
    second = await backend.write_text("cursor.json", "2")
    assert second != first
    assert await backend.read_text_with_etag("cursor.json") == ("2", second)


async def test_if_match_with_the_current_etag_replaces_the_value(backend: MemoryBackend) -> None:
    etag = await backend.write_text("cursor.json", "old")
    new_etag = await backend.write_text("cursor.json", "new", if_match=etag)
    assert await backend.read_text_with_etag("cursor.json") == ("new", new_etag)


async def test_stale_if_match_fails_and_racing_content_survives(backend: MemoryBackend) -> None:
    seen = await backend.write_text("cursor.json", "v1")
    racer = await backend.write_text("cursor.json", "racer", if_match=seen)
    with pytest.raises(ConcurrencyError):
        await backend.write_text("cursor.json", "loser", if_match=seen)
    assert await backend.read_text_with_etag("cursor.json") == ("racer", racer)


async def test_if_match_on_a_missing_key_fails_and_creates_nothing(backend: MemoryBackend) -> None:
    etag = await backend.write_text("gone.json", "x")
    other = "elsewhere.json"
    with pytest.raises(ConcurrencyError):
        await backend.write_text(other, "y", if_match=etag)
    assert await backend.exists(other) is False


async def test_if_absent_creates_a_missing_key(backend: MemoryBackend) -> None:
    etag = await backend.write_text(
        "poll_state/email_cursor.txt", "2026-01-01T00:00:00Z", if_absent=True
    )
    assert await backend.read_text_with_etag("poll_state/email_cursor.txt") == (
        "2026-01-01T00:00:00Z",
        etag,
    )


async def test_if_absent_on_an_existing_key_fails_and_keeps_the_first_value(
    backend: MemoryBackend,
) -> None:
    await backend.write_text("watched_chats", "first\n", if_absent=True)
    with pytest.raises(ConcurrencyError):
        await backend.write_text("watched_chats", "second\n", if_absent=True)
    assert await backend.read_text("watched_chats") == "first\n"


async def test_if_match_and_if_absent_together_are_refused(backend: MemoryBackend) -> None:
    etag = await backend.write_text("k", "v")
    with pytest.raises(ValueError):
        await backend.write_text("k", "w", if_match=etag, if_absent=True)
    assert await backend.read_text("k") == "v"


async def test_unconditional_write_overwrites(backend: MemoryBackend) -> None:
    await backend.write_text("k", "one")
    await backend.write_text("k", "two")
    assert await backend.read_text("k") == "two"


async def test_append_creates_the_key_and_extends_it(backend: MemoryBackend) -> None:
    await backend.append_text("interactions/2026-04-17.jsonl", '{"n": 1}\n')
    assert await backend.exists("interactions/2026-04-17.jsonl") is True
    await backend.append_text("interactions/2026-04-17.jsonl", '{"n": 2}\n')
    assert await backend.read_text("interactions/2026-04-17.jsonl") == '{"n": 1}\n{"n": 2}\n'


async def test_append_changes_the_etag(backend: MemoryBackend) -> None:
    await backend.append_text("log.jsonl", "a\n")
    _, before = await backend.read_text_with_etag("log.jsonl")
    await backend.append_text("log.jsonl", "b\n")
    _, after = await backend.read_text_with_etag("log.jsonl")
    assert before is not None and after is not None and before != after


async def test_list_returns_sorted_keys_under_the_prefix_only(backend: MemoryBackend) -> None:
    for key in ["b/1", "a/2", "ab", "a/1", "c"]:
        await backend.write_text(key, key)
    assert await backend.list() == ["a/1", "a/2", "ab", "b/1", "c"]
    assert await backend.list("a/") == ["a/1", "a/2"]
    assert await backend.list("a") == ["a/1", "a/2", "ab"]
    assert await backend.list("zzz") == []


@pytest.mark.parametrize("key", ODD_KEYS)
async def test_keys_with_percent_colon_at_and_spaces_round_trip(
    backend: MemoryBackend, key: str
) -> None:
    etag = await backend.write_text(key, "value")
    assert await backend.read_text_with_etag(key) == ("value", etag)
    assert await backend.exists(key) is True
    assert await backend.list(key.rsplit("/", 1)[0] + "/") == [key]
    await backend.write_text(key, "next", if_match=etag)
    appended = key + ".log"
    await backend.append_text(appended, "line\n")
    assert await backend.read_text(appended) == "line\n"
    assert await backend.list() == sorted([key, appended])


@pytest.mark.parametrize("key", INVALID_KEYS)
async def test_invalid_keys_are_rejected_by_every_operation(
    backend: MemoryBackend, key: str
) -> None:
    with pytest.raises(InvalidKeyError):
        await backend.read_text(key)
    with pytest.raises(InvalidKeyError):
        await backend.read_text_with_etag(key)
    with pytest.raises(InvalidKeyError):
        await backend.write_text(key, "x")
    with pytest.raises(InvalidKeyError):
        await backend.write_text(key, "x", if_absent=True)
    with pytest.raises(InvalidKeyError):
        await backend.append_text(key, "x")
    with pytest.raises(InvalidKeyError):
        await backend.exists(key)
    assert await backend.list() == []


async def _write_many(backend: MemoryBackend, keys: list[str], *, in_flight: int = 32) -> None:
    gate = asyncio.Semaphore(in_flight)

    async def write(key: str) -> None:
        async with gate:
            await backend.write_text(key, "")

    await asyncio.gather(*(write(key) for key in keys))


@pytest.mark.slow
async def test_list_pages_through_more_than_5000_keys(
    backend: MemoryBackend, backend_kind: str, backend_env: dict[str, str]
) -> None:
    keys = [f"chat_cursors/{i:05d}.json" for i in range(5_003)]
    await _write_many(backend, [*keys, "chat_id", "interactions/2026-04-17.jsonl"])
    assert await backend.list("chat_cursors/") == keys
    assert len(await backend.list()) == len(keys) + 2
    if backend_kind == "blob":
        # The premise: the service stops a page at 5,000 names, so a single request would miss keys.
        client = ContainerClient.from_connection_string(
            backend_env["ENTRABOT_BLOB_CONNECTION_STRING"], backend_env["ENTRABOT_BLOB_CONTAINER"]
        )
        async with client:
            pages = client.list_blob_names(name_starts_with="chat_cursors/").by_page()
            first_page = [name async for name in await anext(pages)]
        assert len(first_page) == 5_000
