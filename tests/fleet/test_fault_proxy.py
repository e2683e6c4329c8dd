"""The fault proxy between replicas and Azurite: each fault does to the store what it says it does."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

import pytest

from service.devstack.azurite import Azurite
from service.devstack.fault_proxy import Decision, FaultProxy, ProxyFault, ProxyRule, decide
from service.storage.blob import BlobBackend
from service.storage.errors import ConcurrencyError, TransientStorageError
from service.telemetry.metrics import StorageMetrics

pytestmark = pytest.mark.azurite


@pytest.fixture
def proxy(azurite: Azurite) -> Iterator[FaultProxy]:
    with FaultProxy(azurite.blob_endpoint, random_seed=3) as running:
        yield running


@pytest.fixture
async def through_proxy(
    azurite: Azurite, proxy: FaultProxy, container_name: str
) -> AsyncIterator[BlobBackend]:
    conn = azurite.connection_string.replace(azurite.blob_endpoint, proxy.blob_endpoint)
    backend = BlobBackend.from_connection_string(conn, container_name, metrics=StorageMetrics())
    await backend.ensure_container()
    try:
        yield backend
    finally:
        await backend.aclose()


@pytest.fixture
async def direct(azurite: Azurite, container_name: str) -> AsyncIterator[BlobBackend]:
    backend = BlobBackend.from_connection_string(
        azurite.connection_string, container_name, metrics=StorageMetrics()
    )
    try:
        yield backend
    finally:
        await backend.aclose()


async def test_signed_requests_pass_through_with_their_conditions(
    through_proxy: BlobBackend, proxy: FaultProxy
) -> None:
    etag = await through_proxy.write_text("chat_cursors/a.json", "v1", if_absent=True)
    assert await through_proxy.read_text_with_etag("chat_cursors/a.json") == ("v1", etag)
    with pytest.raises(ConcurrencyError):
        await through_proxy.write_text("chat_cursors/a.json", "again", if_absent=True)
    newer = await through_proxy.write_text("chat_cursors/a.json", "v2", if_match=etag)
    with pytest.raises(ConcurrencyError):
        await through_proxy.write_text("chat_cursors/a.json", "stale", if_match=etag)
    await through_proxy.append_text("interactions/day.jsonl", "one\n")
    await through_proxy.append_text("interactions/day.jsonl", "two\n")
    assert await through_proxy.read_text_with_etag("chat_cursors/a.json") == ("v2", newer)
    assert await through_proxy.read_text("interactions/day.jsonl") == "one\ntwo\n"
    assert await through_proxy.exists("chat_cursors/a.json") and not await through_proxy.exists(
        "absent"
    )
    assert await through_proxy.list() == ["chat_cursors/a.json", "interactions/day.jsonl"]
    stats = proxy.stats()
    assert stats.forwarded == stats.requests and stats.injected == 0


async def test_a_write_committed_then_dropped_raises_transient_and_the_blob_did_change(
    through_proxy: BlobBackend, direct: BlobBackend, proxy: FaultProxy
) -> None:
    etag = await through_proxy.write_text("poll_state/email_cursor.txt", "before\n", if_absent=True)
    proxy.set_rules([ProxyRule(ProxyFault.COMMIT_THEN_DROP)])
    with pytest.raises(TransientStorageError):
        await through_proxy.write_text("poll_state/email_cursor.txt", "after\n", if_match=etag)
    content, new_etag = await direct.read_text_with_etag("poll_state/email_cursor.txt")
    assert content == "after\n" and new_etag != etag
    assert proxy.stats().commit_then_drop == 1


async def test_an_append_committed_then_dropped_lands_exactly_once(
    through_proxy: BlobBackend, direct: BlobBackend, proxy: FaultProxy
) -> None:
    await through_proxy.append_text("interactions/day.jsonl", "first\n")
    proxy.set_rules([ProxyRule(ProxyFault.COMMIT_THEN_DROP, times=1)])
    with pytest.raises(TransientStorageError):
        await through_proxy.append_text("interactions/day.jsonl", "second\n")
    assert await direct.read_text("interactions/day.jsonl") == "first\nsecond\n"


async def test_a_write_failed_before_forwarding_leaves_the_blob_unchanged(
    through_proxy: BlobBackend, direct: BlobBackend, proxy: FaultProxy
) -> None:
    etag = await through_proxy.write_text("chat_cursors/b.json", "kept", if_absent=True)
    proxy.set_rules([ProxyRule(ProxyFault.FAIL_BEFORE, methods=frozenset({"PUT"}))])
    with pytest.raises(TransientStorageError):
        await through_proxy.write_text("chat_cursors/b.json", "never", if_match=etag)
    with pytest.raises(TransientStorageError):
        await through_proxy.write_text("chat_cursors/new.json", "never", if_absent=True)
    assert await direct.read_text_with_etag("chat_cursors/b.json") == ("kept", etag)
    assert not await direct.exists("chat_cursors/new.json")
    assert proxy.stats().fail_before == 2


async def test_commit_then_drop_spares_reads_and_answers_that_committed_nothing(
    through_proxy: BlobBackend, proxy: FaultProxy
) -> None:
    etag = await through_proxy.write_text("chat_cursors/c.json", "v1", if_absent=True)
    await through_proxy.write_text("chat_cursors/c.json", "v2", if_match=etag)
    proxy.set_rules([ProxyRule(ProxyFault.COMMIT_THEN_DROP)])
    assert (await through_proxy.read_text_with_etag("chat_cursors/c.json"))[0] == "v2"
    with pytest.raises(ConcurrencyError):  # a 412 committed nothing: it reaches the client as it is
        await through_proxy.write_text("chat_cursors/c.json", "stale", if_match=etag)
    assert proxy.stats().commit_then_drop == 0


async def test_rules_follow_their_path_filter_and_budget(
    through_proxy: BlobBackend, proxy: FaultProxy
) -> None:
    proxy.set_rules(
        [
            ProxyRule(ProxyFault.FAIL_BEFORE, path=r"/chat_cursors/", times=2),
            ProxyRule(ProxyFault.DELAY, delay_ms=5, path=r"/watched_chats"),
        ]
    )
    await through_proxy.write_text("watched_chats", "19:a\n")
    for _ in range(2):
        with pytest.raises(TransientStorageError):
            await through_proxy.write_text("chat_cursors/d.json", "x")
    await through_proxy.write_text("chat_cursors/d.json", "x")  # the budget of two is spent
    stats = proxy.stats()
    assert (stats.fail_before, stats.delayed) == (2, 1)


def test_delays_add_up_and_the_first_failing_rule_decides() -> None:
    rules = [
        ProxyRule(ProxyFault.DELAY, delay_ms=10),
        ProxyRule(ProxyFault.FAIL_BEFORE, methods=frozenset({"PUT"})),
        ProxyRule(ProxyFault.COMMIT_THEN_DROP),
        ProxyRule(ProxyFault.DELAY, delay_ms=5),
    ]
    always = itertools.repeat(0.0).__next__
    assert decide(rules, [None] * 4, "PUT", "/acct/c/k", always) == Decision(
        15, ProxyFault.FAIL_BEFORE, (0, 1, 3)
    )
    assert decide(rules, [None] * 4, "GET", "/acct/c/k", always) == Decision(15, None, (0, 3))
    assert decide(rules, [None, 0, None, None], "PUT", "/acct/c/k", always) == Decision(
        15, ProxyFault.COMMIT_THEN_DROP, (0, 2, 3)
    )


def test_a_rule_fires_only_when_its_roll_is_under_its_probability() -> None:
    rule = ProxyRule(ProxyFault.FAIL_BEFORE, probability=0.25)
    rolls = iter([0.2, 0.25, 0.9])
    fates = [decide([rule], [None], "PUT", "/k", rolls.__next__).fault for _ in range(3)]
    assert fates == [ProxyFault.FAIL_BEFORE, None, None]


def test_a_rule_that_cannot_work_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="probability"):
        ProxyRule(ProxyFault.FAIL_BEFORE, probability=1.5)
    with pytest.raises(ValueError, match="delay_ms"):
        ProxyRule(ProxyFault.DELAY)
