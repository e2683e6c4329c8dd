"""A chat's first watch (service.workers.first_watch, issue 35 item 5): the fleet starts a chat's cursor
when a role first watches it, host or no host, so everything people write in it afterwards reaches the
first host, once, within the age bound (``ENTRABOT_CHAT_MAX_AGE_H``, 24 h here). Before, a chat's
cursor started at a reader's first sight, which waits for a host: all but the newest message written
before the first host were lost.

The replica's own wiring, the Graph emulator over real HTTP, on a LocalBackend and on Azurite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta, timezone

import pytest
from settings_env import ROOMY_BUDGET
from worker_stack import RecordingTarget, WorkerStack, build_stack

from emulator.seed import build_seed
from emulator.server import RunningEmulator, start_emulator
from emulator.state import ChatMessage
from service.domain.conversation import TEAMS_CHATS
from service.ledger.claims.chat_cursor import ChatCursor, parse_chat_cursor
from service.storage.backend import MemoryBackend
from service.storage.blob import BlobBackend


def now() -> datetime:
    return datetime.now(timezone.utc)


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=3, throttle=ROOMY_BUDGET)) as running:
        yield running


@pytest.fixture
async def stack(
    emulator: RunningEmulator, any_backend: MemoryBackend
) -> AsyncIterator[WorkerStack]:
    built = await build_stack(emulator, any_backend, is_cloud=isinstance(any_backend, BlobBackend))
    yield built
    await built.aclose()


def chat(emulator: RunningEmulator, index: int) -> str:
    chat_id = emulator.seed.chats[index].id
    assert chat_id is not None
    return chat_id


def say(
    emulator: RunningEmulator,
    chat_id: str,
    text: str,
    *,
    ago: timedelta | None = None,
    who: int = 0,
) -> ChatMessage:
    return emulator.state.post_message(
        chat_id,
        sender_id=emulator.seed.humans[who].id,
        content=text,
        created=now() - ago if ago is not None else None,
    )


async def cursor_of(stack: WorkerStack, chat_id: str) -> ChatCursor:
    text = await stack.backend.read_text(TEAMS_CHATS.cursor_key(chat_id))
    assert text is not None, "no cursor"
    return parse_chat_cursor(text)


def message_reads(emulator: RunningEmulator, chat_id: str) -> int:
    return sum(
        1
        for r in emulator.stats.snapshot()["recent"]
        if r["route"] == "/v1.0/chats/{id}/messages" and chat_id in r["path"]
    )


async def cycles(stack: WorkerStack, n: int) -> None:
    for _ in range(n):
        await stack.chats.cycle()


async def test_what_people_write_before_any_host_reaches_the_first_host_once_all_of_it(
    stack: WorkerStack, emulator: RunningEmulator
) -> None:
    busy = chat(emulator, 1)
    history = say(emulator, busy, "before the fleet existed", ago=timedelta(days=3))
    emulator.stats.reset()
    await stack.discovery.cycle()  # the container's first boot: no host anywhere
    for chat_id in stack.watched.chats:
        await cursor_of(stack, chat_id)  # every chat watched has its cursor, host or no host
    assert (await cursor_of(stack, busy)).last_ts == history.created
    assert message_reads(emulator, busy) == 0  # its preview was enough
    written = [say(emulator, busy, f"while nobody listened {i}", who=i % 2) for i in range(3)]
    emulator.state.post_message(
        busy, sender_id=emulator.seed.agent_user.id, content="the agent's own"
    )
    emulator.stats.reset()
    await cycles(stack, 3)  # no host yet: hints are kept, nothing is read or claimed
    assert message_reads(emulator, busy) == 0
    assert (await cursor_of(stack, busy)).last_ts == history.created

    target = RecordingTarget()
    stack.hub.register(target)
    await cycles(stack, 3)
    assert target.ids == [m.id for m in written]  # all of them, not only the newest; once
    await cycles(stack, 2)
    assert target.ids == [m.id for m in written]


async def test_nothing_older_than_the_age_bound_reaches_the_first_host(
    stack: WorkerStack, emulator: RunningEmulator
) -> None:
    """The chat was first watched three days ago (its newest message then); a host comes only now:
    what was written since and is older than 24 h is decided, never delivered."""
    busy = chat(emulator, 2)
    watched_at = say(emulator, busy, "three days ago", ago=timedelta(days=3))
    await stack.discovery.cycle()
    stale = [say(emulator, busy, f"stale {h} h", ago=timedelta(hours=h)) for h in (30, 25)]
    fresh = [
        say(emulator, busy, "two hours ago", ago=timedelta(hours=2)),
        say(emulator, busy, "now"),
    ]
    target = RecordingTarget()
    stack.hub.register(target)
    await cycles(stack, 3)
    assert target.ids == [m.id for m in fresh]
    cursor = await cursor_of(stack, busy)
    assert cursor.last_ts == fresh[-1].created  # the stale ones are behind the watermark now
    assert watched_at.id not in target.ids and not {m.id for m in stale} & set(target.ids)


async def test_a_fresh_newest_message_at_the_first_watch_still_surfaces_and_nothing_older(
    stack: WorkerStack, emulator: RunningEmulator
) -> None:
    busy = chat(emulator, 0)
    say(emulator, busy, "last week", ago=timedelta(days=7))
    older = say(emulator, busy, "three hours ago", ago=timedelta(hours=3))
    newest = say(emulator, busy, "an hour ago", ago=timedelta(hours=1))
    await stack.discovery.cycle()
    target = RecordingTarget()
    stack.hub.register(target)
    await cycles(stack, 3)
    assert target.ids == [newest.id] and older.id not in target.ids


async def test_a_chat_that_appears_after_the_first_boot_gets_everything_written_after_its_first_watch(
    stack: WorkerStack, emulator: RunningEmulator
) -> None:
    await stack.discovery.cycle()  # the first boot's chats
    seed = emulator.seed
    people = [seed.agent_user.id, seed.humans[0].id, seed.humans[1].id]
    started, _ = emulator.state.create_chat("group", people, topic="started by a message")
    opener = say(emulator, started.id, "a new chat, with the agent in it")
    # Created quietly: only Graph's own "members added" event is in it.
    empty, _ = emulator.state.create_chat("group", people, topic="started empty")
    await cycles(stack, 2)  # no host: the scanner watches the new chats and starts their cursors
    await stack.discovery.cycle()
    assert {started.id, empty.id} <= stack.watched.chats
    later = {
        started.id: [say(emulator, started.id, f"then {i}", who=i % 2) for i in range(2)],
        empty.id: [say(emulator, empty.id, f"first words {i}") for i in range(2)],
    }
    await cycles(stack, 2)
    target = RecordingTarget()
    stack.hub.register(target)
    await cycles(stack, 4)
    by_chat = {c: [m.message_id for m in target.received if m.chat_id == c] for c in later}
    assert by_chat[started.id] == [opener.id, *(m.id for m in later[started.id])]
    assert by_chat[empty.id] == [m.id for m in later[empty.id]]
    keys = [(m.chat_id, m.message_id) for m in target.received]
    assert len(keys) == len(set(keys)) == 5  # ids are unique within a chat only
