"""FaultyBackend: each fault does what it says, scripts count, and a seed makes a run reproducible."""

from __future__ import annotations

import pytest

from service.storage.errors import ConcurrencyError, TokenExpiredError, TransientStorageError
from service.storage.faults import CORRUPT_PAYLOAD, Fault, FaultPlan, FaultRule, FaultyBackend, Op
from service.storage.local import LocalBackend


@pytest.fixture
def inner(tmp_path) -> LocalBackend:  # noqa: ANN001 - pytest's tmp_path
    return LocalBackend(tmp_path / "store")


async def test_a_failing_read_raises_the_chosen_error(inner: LocalBackend) -> None:
    faulty = FaultyBackend(
        inner, FaultPlan((FaultRule(Fault.READ_FAILS, error=TokenExpiredError, times=1),))
    )
    with pytest.raises(TokenExpiredError):
        await faulty.read_text_with_etag("k")
    assert await faulty.read_text_with_etag("k") == (None, None)


async def test_a_write_failing_before_commit_leaves_the_store_untouched(
    inner: LocalBackend,
) -> None:
    faulty = FaultyBackend(inner, FaultPlan((FaultRule(Fault.WRITE_FAILS, times=1),)))
    with pytest.raises(TransientStorageError):
        await faulty.write_text("k", "v", if_absent=True)
    assert not await inner.exists("k")


async def test_a_write_that_commits_but_loses_its_response_is_in_the_store(
    inner: LocalBackend,
) -> None:
    faulty = FaultyBackend(inner, FaultPlan((FaultRule(Fault.WRITE_RESPONSE_LOST, times=1),)))
    with pytest.raises(TransientStorageError):
        await faulty.write_text("k", "v", if_absent=True)
    assert await inner.read_text("k") == "v"


async def test_a_lost_response_can_be_reported_as_a_conflict(inner: LocalBackend) -> None:
    faulty = FaultyBackend(
        inner, FaultPlan((FaultRule(Fault.WRITE_RESPONSE_LOST, error=ConcurrencyError),))
    )
    with pytest.raises(ConcurrencyError):
        await faulty.append_text("log", "line\n")
    assert await inner.read_text("log") == "line\n"


async def test_a_late_commit_lands_after_the_error(inner: LocalBackend) -> None:
    faulty = FaultyBackend(inner, FaultPlan((FaultRule(Fault.WRITE_COMMITS_LATE, delay_s=0.01),)))
    with pytest.raises(TransientStorageError):
        await faulty.write_text("k", "v")
    await faulty.drain()
    assert await inner.read_text("k") == "v"


async def test_missing_etags_and_corrupt_payloads_are_served_on_reads(inner: LocalBackend) -> None:
    await inner.write_text("k", "v")
    faulty = FaultyBackend(inner)
    faulty.add(FaultRule(Fault.READ_MISSING_ETAG, times=1), FaultRule(Fault.READ_CORRUPT, times=1))
    assert await faulty.read_text_with_etag("k") == ("v", None)
    content, etag = await faulty.read_text_with_etag("k")
    assert content == CORRUPT_PAYLOAD and etag is not None
    assert (await faulty.read_text_with_etag("k"))[0] == "v"


async def test_a_script_fires_on_matching_keys_after_its_skips_for_its_count(
    inner: LocalBackend,
) -> None:
    faulty = FaultyBackend(inner)
    faulty.add(FaultRule(Fault.WRITE_FAILS, key="chat_cursors/*", skip=1, times=2))
    await faulty.write_text("other", "x")
    await faulty.write_text("chat_cursors/a.json", "1")
    for _ in range(2):
        with pytest.raises(TransientStorageError):
            await faulty.write_text("chat_cursors/a.json", "2")
    await faulty.write_text("chat_cursors/a.json", "3")
    assert (
        faulty.injected[Fault.WRITE_FAILS] == 2
        and await inner.read_text("chat_cursors/a.json") == "3"
    )


async def test_a_rule_can_be_limited_to_some_operations(inner: LocalBackend) -> None:
    faulty = FaultyBackend(
        inner, FaultPlan((FaultRule(Fault.READ_FAILS, ops=frozenset({Op.LIST})),))
    )
    await faulty.read_text("k")
    with pytest.raises(TransientStorageError):
        await faulty.list()


async def test_the_same_seed_gives_the_same_faults(inner: LocalBackend) -> None:
    async def pattern(seed: int) -> list[bool]:
        faulty = FaultyBackend(
            inner, FaultPlan((FaultRule(Fault.READ_FAILS, probability=0.3),), seed=seed)
        )
        outcome = []
        for _ in range(40):
            try:
                await faulty.read_text("k")
                outcome.append(True)
            except TransientStorageError:
                outcome.append(False)
        return outcome

    first, again, other = await pattern(7), await pattern(7), await pattern(8)
    assert first == again and first != other and 0 < first.count(False) < 40


async def test_heal_makes_the_wrapper_transparent(inner: LocalBackend) -> None:
    faulty = FaultyBackend(
        inner, FaultPlan((FaultRule(Fault.READ_FAILS), FaultRule(Fault.DELAY, delay_s=0.001)))
    )
    faulty.heal()
    assert await faulty.read_text("k") is None and sum(faulty.injected.values()) == 0
    assert "FaultyBackend" in faulty.describe()
