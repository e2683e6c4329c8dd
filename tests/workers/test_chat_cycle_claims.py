"""How a chat poll cycle spreads its claims over chats: a push host's messages are claimed chat by
chat as each chat is read, so one slow chat holds back none of them (only messages a sponsor wait
alone would take wait for every chat of the cycle). The emulator over HTTP, the ledger on a
LocalBackend."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from settings_env import ROOMY_BUDGET
from worker_stack import RecordingTarget, WorkerStack, build_stack

from emulator.faults import FaultRule
from emulator.seed import build_seed
from emulator.server import RunningEmulator, start_emulator
from service.storage.local import LocalBackend

SLOW_MS = 60_000  # the slow chat's read outlasts the test; the cycle is cancelled, never awaited
BOUND_S = 30.0


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=3, throttle=ROOMY_BUDGET)) as running:
        yield running


@pytest.fixture
async def stack(emulator: RunningEmulator, tmp_path: Path) -> AsyncIterator[WorkerStack]:
    built = await build_stack(emulator, LocalBackend(tmp_path / "state"), is_cloud=False)
    yield built
    await built.aclose()


async def test_a_slow_chat_holds_back_no_push_hosts_message_from_the_other_chats(stack, emulator):
    target = RecordingTarget()
    stack.hub.register(target)
    await stack.discovery.cycle()
    await stack.chats.cycle()  # first sight everywhere
    await stack.chats.cycle()
    slow, quick = emulator.seed.chats[1].id, emulator.seed.chats[2].id
    assert slow is not None and quick is not None
    person = emulator.seed.humans[0].id  # Ada is in every chat
    emulator.state.post_message(slow, sender_id=person, content="behind a slow read")
    posted = emulator.state.post_message(quick, sender_id=person, content="goes through at once")
    emulator.context.faults.add(
        FaultRule(
            status=None, latency_ms=SLOW_MS, route_pattern=f"/chats/{re.escape(slow)}/messages"
        )
    )
    cycle = asyncio.create_task(stack.chats.cycle())
    try:
        async with asyncio.timeout(BOUND_S):
            while posted.id not in target.ids:
                await asyncio.sleep(0.05)
        assert not cycle.done()  # delivered while the slow chat was still being read
    finally:
        cycle.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cycle
