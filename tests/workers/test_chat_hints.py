"""The chat poll's hint hook: a chat a change hint names is read in the next cycle even when the
chat scan says nothing changed there; without a hint a quiet chat costs no message read. The
emulator over HTTP, hints and ledger on a LocalBackend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from worker_stack import RecordingTarget, WorkerStack, build_stack

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.ledger.hints import Hint, HintLog, HintReader
from service.storage.local import LocalBackend


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=3, throttle=ThrottleBudget(chat_messages_per_s=1000,
                                                                    other_per_s=1000))) as running:
        yield running


@pytest.fixture
async def stack(emulator: RunningEmulator, tmp_path: Path) -> AsyncIterator[tuple[WorkerStack, HintLog]]:
    backend = LocalBackend(tmp_path / "state")
    built = await build_stack(emulator, backend, is_cloud=False)
    built.chats.hints = HintReader(backend)
    built.chats.guard_cycles = 0  # no rotating guard read: only the scan and the hints choose chats
    yield built, HintLog(backend)
    await built.aclose()


def message_reads(stack: WorkerStack) -> float:
    return stack.metrics.registry.get_sample_value(
        "entrabot_graph_requests_total", {"route": "chats/{id}/messages", "status": "200"}) or 0.0


def hints_counted(stack: WorkerStack, outcome: str) -> float:
    return stack.metrics.registry.get_sample_value("entrabot_chat_hints_total", {"outcome": outcome}) or 0.0


async def test_a_hinted_chat_is_read_although_the_scan_says_it_is_quiet(stack, emulator) -> None:
    workers, hints = stack
    workers.hub.register(RecordingTarget())
    await workers.discovery.cycle()
    await workers.chats.cycle()  # first sight everywhere
    await workers.chats.cycle()  # every cursor settled
    before = message_reads(workers)
    await workers.chats.cycle()
    assert message_reads(workers) == before  # quiet chats, no hint: no chat read

    hinted = emulator.seed.chats[1].id
    assert hinted is not None
    await hints.add([Hint(hinted, datetime.now(UTC), "m-1", "notification"),
                     Hint("19:not-watched@thread.v2", datetime.now(UTC), None, "notification")])
    await workers.chats.cycle()
    assert message_reads(workers) == before + 1  # the hinted chat alone
    assert hints_counted(workers, "joined") == 1 and hints_counted(workers, "not_watched") == 1

    await workers.chats.cycle()  # a hint is consumed once
    assert message_reads(workers) == before + 1
