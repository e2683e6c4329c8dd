"""A first sight claims only in a chat new to the fleet: never over a cursor another replica wrote.

A replica whose host only waits for a sponsor sees a group chat whose newest message is someone
else's: it cannot take it, so it claims nothing and the chat stays new to it. Meanwhile a replica with
a push host reads the same chat and writes the fleet's cursor. When the wait replica next looks, the
sponsor has answered after another person's message: taking its view of the chat as new, and moving
the fleet's watermark to the sponsor's reply, would leave the other person's message behind the
watermark for every replica, claimed by nobody, never delivered. Two replicas' workers on one store,
the emulator over HTTP.

A reader's first sight is the fallback since a fleet role starts a chat's cursor at its first watch
(service.workers.first_watch): it is what happens to a chat watched without a cursor (a container an
earlier release watched chats in, or a first watch whose write failed) while the roles cannot list
``/me/chats``. That is the setting here; the chats are read on change notifications.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from settings_env import ROOMY_BUDGET
from worker_stack import RecordingTarget, WorkerStack, build_stack

from emulator.faults import FaultRule
from emulator.seed import build_seed
from emulator.server import RunningEmulator, start_emulator
from service.domain.conversation import TEAMS_CHATS
from service.storage.local import LocalBackend
from service.tools.sponsor_wait_target import SponsorWaitTarget

ROOMY = ROOMY_BUDGET


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=2, history=0, throttle=ROOMY)) as running:
        yield running


@pytest.fixture
async def replicas(
    emulator: RunningEmulator, tmp_path: Path
) -> AsyncIterator[tuple[WorkerStack, WorkerStack]]:
    backend = LocalBackend(tmp_path / "state")
    waiting, pushing = (
        await build_stack(emulator, backend, is_cloud=False),
        await build_stack(emulator, backend, is_cloud=False),
    )
    await waiting.discovery.cycle()
    await pushing.discovery.cycle()
    # Watched without cursors, and no role can list the chats to start them.
    for key in await backend.list(TEAMS_CHATS.cursor_prefix):
        (tmp_path / "state" / key).unlink()
    emulator.context.faults.add(FaultRule(status=400, route_pattern=r"/me/chats$"))
    yield waiting, pushing
    await waiting.aclose()
    await pushing.aclose()


async def test_a_first_sight_claim_never_moves_another_replicas_cursor_past_an_unclaimed_message(
    emulator: RunningEmulator, replicas: tuple[WorkerStack, WorkerStack], tmp_path: Path
) -> None:
    waiting, pushing = replicas
    chat = emulator.seed.chats[1].id  # the agent, Ada (the sponsor) and Grace
    assert chat is not None
    ada, grace = emulator.seed.humans[0].id, emulator.seed.humans[1].id
    wait = SponsorWaitTarget("non-push", began=datetime.now(timezone.utc))
    waiting.hub.register(wait)

    hello = emulator.state.post_message(chat, sender_id=grace, content="hello").id
    await waiting.notify(chat, hello)
    await waiting.chats.cycle()  # Grace's message is no wait's to take: nothing claimed
    assert await LocalBackend(tmp_path / "state").read_text(TEAMS_CHATS.cursor_key(chat)) is None

    host = RecordingTarget()
    pushing.hub.register(host)
    await pushing.chats.cycle()  # first sight on the push replica: the fleet's cursor now exists
    assert host.ids == [hello]
    host.alive = False  # its host disconnects

    question = emulator.state.post_message(
        chat, sender_id=grace, content="can you review the contract?"
    ).id
    answer = emulator.state.post_message(chat, sender_id=ada, content="ship it").id
    await waiting.notify(chat, answer)
    await waiting.chats.cycle()
    await waiting.chats.cycle()
    handed = await wait.handed_over(timeout_s=10)
    assert [m.message_id for m in handed] == [answer]

    host.alive = True  # the push host is back: Grace's question is still the fleet's to deliver
    await pushing.notify(chat, question)  # its own notification (one want per chat merges them)
    await pushing.chats.cycle()
    await pushing.chats.cycle()
    assert host.ids == [hello, question]
