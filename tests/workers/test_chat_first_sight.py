"""First sight and steady polling against edits, soft deletes and reactions of old messages.

Each of them moves an old message's lastModifiedDateTime to now (as Graph does) and never its
createdDateTime. First sight judges age and sets its baseline by creation time, so none of them can
make an old message look like the newest, pull a watermark back, or surface history; with the
``/me/chats`` preview scan working, and failing with the chats known only from change notifications
(whose hints carry no preview, so first sight reads the chat). The emulator runs over real HTTP, the
ledger on a LocalBackend, changes are made through the emulator's admin routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from settings_env import ROOMY_BUDGET
from worker_stack import RecordingTarget, WorkerStack, build_stack

from emulator.faults import FaultRule
from emulator.seed import build_seed
from emulator.server import RunningEmulator, start_emulator
from emulator.state import ChatMessage
from service.domain.conversation import TEAMS_CHATS
from service.ledger.claims.chat_cursor import parse_chat_cursor
from service.storage.local import LocalBackend

ROOMY = ROOMY_BUDGET
CHANGES = ("edit", "delete", "react")
HISTORY_DAYS = (6, 5, 4, 3, 2)  # one message a day; the 3-day-old one is changed


def now() -> datetime:
    return datetime.now(timezone.utc)


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=2, throttle=ROOMY)) as running:
        yield running


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "state")


@pytest.fixture
async def stack(emulator: RunningEmulator, backend: LocalBackend) -> AsyncIterator[WorkerStack]:
    built = await build_stack(emulator, backend, is_cloud=False)
    yield built
    await built.aclose()


def group_chat(emulator: RunningEmulator) -> str:
    chat_id = emulator.seed.chats[1].id
    assert chat_id is not None
    return chat_id


def post_history(
    emulator: RunningEmulator, chat: str, *, newest_age: timedelta
) -> list[ChatMessage]:
    """Messages from two people, days apart, and one more ``newest_age`` old: oldest first."""
    people = [emulator.seed.humans[0].id, emulator.seed.humans[1].id]
    ages = [timedelta(days=d) for d in HISTORY_DAYS] + [newest_age]
    return [
        emulator.state.post_message(
            chat, sender_id=people[i % 2], content=f"history {i}", created=now() - age
        )
        for i, age in enumerate(ages)
    ]


async def change(stack: WorkerStack, chat: str, message: ChatMessage, how: str) -> None:
    """Edit, soft-delete or react to ``message`` through the emulator's admin routes (over HTTP)."""
    url = f"{stack.emulator.admin_url}/chats/{chat}/messages/{message.id}"
    if how == "edit":
        response = await stack.http.patch(url, json={"content": "edited days later"})
    elif how == "delete":
        response = await stack.http.delete(url)
    else:
        response = await stack.http.post(
            f"{url}/reactions",
            json={"user": stack.emulator.seed.humans[1].id, "reaction_type": "like"},
        )
    assert response.status_code in (200, 201), response.text
    changed = next(m for m in stack.emulator.state.messages(chat) if m.id == message.id)
    assert changed.last_modified > message.last_modified and changed.created == message.created


def refuse_scan(emulator: RunningEmulator) -> None:
    """The elected scanner's and the sweep's /me/chats reads are refused from now on: the chats are
    read only on change notifications, whose hints carry no preview (first sight reads the chat)."""
    emulator.context.faults.add(FaultRule(status=400, route_pattern=r"/me/chats$"))


async def connect(
    stack: WorkerStack, *, scan_fails: bool, target_id: str = "recorder"
) -> RecordingTarget:
    target = RecordingTarget(target_id=target_id)
    stack.hub.register(target)
    await stack.discovery.cycle()
    if scan_fails:
        refuse_scan(stack.emulator)
        for chat in stack.watched.chats:
            await stack.notify(chat)
    return target


async def announce(
    stack: WorkerStack, chat: str, message: ChatMessage, *, scan_fails: bool
) -> None:
    """Graph's change notification for ``message`` (created, edited, deleted or reacted to), when the
    scan cannot see it."""
    if scan_fails:
        await stack.notify(chat, message.id)


async def baseline(backend: LocalBackend, chat: str) -> datetime | None:
    text = await backend.read_text(TEAMS_CHATS.cursor_key(chat))
    assert text is not None, "first sight wrote no cursor"
    return parse_chat_cursor(text).last_ts


@pytest.mark.parametrize("scan_fails", [False, True], ids=["scan", "no-scan"])
@pytest.mark.parametrize("how", CHANGES)
async def test_a_changed_old_message_never_surfaces_when_all_history_is_old(
    stack, emulator, backend, how, scan_fails
):
    chat = group_chat(emulator)
    history = post_history(emulator, chat, newest_age=timedelta(hours=26))
    await change(stack, chat, history[3], how)  # the 3-day-old message
    target = await connect(stack, scan_fails=scan_fails)
    for _ in range(3):
        await stack.chats.cycle()
    assert target.ids == []
    assert (
        await baseline(backend, chat) == history[-1].created
    )  # the newest by creation, not the changed one
    fresh = emulator.state.post_message(
        chat, sender_id=emulator.seed.humans[0].id, content="new today"
    )
    await announce(stack, chat, fresh, scan_fails=scan_fails)
    await stack.chats.cycle()
    assert target.ids == [fresh.id]


@pytest.mark.parametrize("scan_fails", [False, True], ids=["scan", "no-scan"])
@pytest.mark.parametrize("how", CHANGES)
async def test_first_sight_surfaces_only_the_newest_message_when_an_old_one_changed(
    stack, emulator, how, scan_fails
):
    chat = group_chat(emulator)
    history = post_history(emulator, chat, newest_age=timedelta(hours=1))
    await change(stack, chat, history[3], how)
    target = await connect(stack, scan_fails=scan_fails)
    for _ in range(3):
        await stack.chats.cycle()
    assert target.ids == [history[-1].id]  # the hour-old newest message, once; no history


@pytest.mark.parametrize("how", CHANGES)
async def test_a_change_to_an_old_message_after_first_sight_never_surfaces_it(
    stack, emulator, backend, how
):
    chat = group_chat(emulator)
    history = post_history(emulator, chat, newest_age=timedelta(hours=26))
    target = await connect(stack, scan_fails=True)  # read on notifications only
    await stack.chats.cycle()  # first sight
    await stack.chats.cycle()  # steady
    watermark = await baseline(backend, chat)
    await change(stack, chat, history[3], how)
    await announce(stack, chat, history[3], scan_fails=True)
    for _ in range(2):
        await stack.chats.cycle()
    assert target.ids == []
    assert await baseline(backend, chat) == watermark  # never pulled back


@pytest.mark.parametrize("how", CHANGES)
async def test_a_change_to_a_message_that_left_the_50_id_tail_never_surfaces_it(
    stack, emulator, backend, how
):
    """Two replicas share the ledger: one delivers a burst of 60, the other resolved its cursor before
    the burst (its own watermark is behind). The first message of the burst, out of the 50-id tail,
    is then changed: neither replica surfaces it again."""
    chat = group_chat(emulator)
    other = await build_stack(emulator, backend, is_cloud=False)
    try:
        other_target = await connect(other, scan_fails=False, target_id="other")
        target = await connect(stack, scan_fails=True)  # read on notifications only
        await stack.chats.cycle()  # first sight of an empty chat
        await stack.chats.cycle()
        await other.chats.cycle()  # its cursor resolved before the burst
        burst = [
            emulator.state.post_message(
                chat, sender_id=emulator.seed.humans[i % 2].id, content=f"burst {i}"
            )
            for i in range(60)
        ]
        await announce(stack, chat, burst[-1], scan_fails=True)
        await stack.chats.cycle()
        assert target.ids == [m.id for m in burst]
        await change(stack, chat, burst[0], how)
        await announce(stack, chat, burst[0], scan_fails=True)
        for _ in range(2):
            await stack.chats.cycle()
            await other.chats.cycle()
        assert target.ids == [m.id for m in burst] and other_target.ids == []
    finally:
        await other.aclose()
