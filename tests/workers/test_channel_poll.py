"""Team channels through the replica's own wiring: the channel watch finds the agent's teams and
channels and starts their cursors, and the channel poll delivers what the delivery rule says is the
agent's, with the team's, the channel's and the thread's names. Two replicas' workers on one store, the
emulator over real HTTP; the cycles are driven by hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from settings_env import ROOMY_BUDGET
from channel_tenant import post_mention, with_team
from worker_stack import RecordingTarget, WorkerStack, build_stack

from emulator.seed import Seed, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.delivery.push import build_channel_push
from service.domain.channel_place import channel_conversation_id
from service.domain.conversation import TEAM_CHANNELS
from service.domain.message import Source
from service.ledger.fleet.hints import Hint, HintLog
from service.storage.local import LocalBackend
from service.workers import channel_watch
from service.workers.channel_watch import ChannelWatch

TEAM = "7d1c0b8e-0000-4000-8000-00000000e002"


def _seed() -> Seed:
    base = build_seed(chats=1, humans=3, throttle=ROOMY_BUDGET)
    ada, grace = base.humans[0].id, base.humans[1].id
    reply = {"from_user": grace, "content": "old reply", "created": "-9m"}
    history = {"from_user": ada, "content": "history", "created": "-10m", "replies": [reply]}
    return with_team(base, TEAM, "Engineering", [{"display_name": "Ops", "messages": [history]}])


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(_seed()) as running:
        yield running


@pytest.fixture
async def fleet(
    emulator: RunningEmulator, tmp_path: Path
) -> AsyncIterator[tuple[WorkerStack, WorkerStack, RecordingTarget, RecordingTarget]]:
    backend = LocalBackend(tmp_path / "state")
    stacks = [
        await build_stack(emulator, backend, is_cloud=False, replica_id=f"r{i}") for i in (1, 2)
    ]
    hosts = [RecordingTarget(f"host-{i}") for i in (1, 2)]
    for stack, host in zip(stacks, hosts, strict=True):
        stack.hub.register(host)
    yield stacks[0], stacks[1], hosts[0], hosts[1]
    for stack in stacks:
        await stack.aclose()


def _watch(stack: WorkerStack) -> ChannelWatch:
    assert stack.channels is not None
    [watch] = stack.channels.roles
    assert isinstance(watch, ChannelWatch)
    return watch


async def _discover(stack: WorkerStack) -> int:
    """The watch's walk, as its holder makes it (the lease taken first, as its cycle does)."""
    watch = _watch(stack)
    await watch.lease.keep()
    return await watch.discover()


def _channel(emulator: RunningEmulator, name: str) -> str:
    channels = emulator.state.teams.channels(TEAM, None)
    return next(c.id for c in channels if c.display_name == name)


async def _look(stacks: tuple[WorkerStack, ...], *conversations: str) -> None:
    """What the watch's rotation does for each channel: a hint, then every replica's poll."""
    backend = stacks[0].backend
    at = datetime.now(timezone.utc)
    await HintLog(backend).add(
        Hint(c, at, source="rotation", kind="channel") for c in conversations
    )
    for stack in stacks:
        assert stack.channels is not None
        await stack.channels.cycle()


async def test_a_mention_and_replies_in_the_agents_thread_are_delivered_once_with_names(
    emulator: RunningEmulator,
    fleet: tuple[WorkerStack, WorkerStack, RecordingTarget, RecordingTarget],
) -> None:
    one, two, host_one, host_two = fleet
    seed = emulator.seed
    ada, grace = seed.humans[0], seed.humans[1]
    agent = seed.agent_user
    ops = _channel(emulator, "Ops")
    conversation = channel_conversation_id(TEAM, ops)
    teams = emulator.state.teams

    assert await _discover(one) == 2  # General and Ops; the cursors start at the newest
    assert await _discover(one) == 0  # already watched
    assert await _discover(two) == 0  # not its turn: the lease is one's
    assert set(TEAM_CHANNELS.cursor_key(c) for c in [conversation]) <= set(
        await one.backend.list(TEAM_CHANNELS.cursor_prefix)
    )
    await _look((one, two), conversation)
    assert host_one.received == [] and host_two.received == []  # first sight replays no history

    asked = post_mention(
        teams,
        TEAM,
        ops,
        sender_id=ada.id,
        agent=agent,
        text="please ship it",
        subject="Release 4.2",
    )
    chatter = teams.post(TEAM, ops, sender_id=grace.id, content="lunch anyone?")
    answer = teams.post(TEAM, ops, sender_id=agent.id, content="on it", reply_to_id=asked.id)
    follow_up = teams.post(TEAM, ops, sender_id=ada.id, content="thanks!", reply_to_id=asked.id)
    aside = teams.post(TEAM, ops, sender_id=grace.id, content="same", reply_to_id=chatter.id)
    await _look((one, two), conversation)
    await _look((two, one), conversation)  # the same hint read again: nothing twice

    received = host_one.received + host_two.received
    counts = Counter(m.message_id for m in received)
    assert counts == Counter({asked.id: 1, follow_up.id: 1}), (chatter.id, aside.id, answer.id)
    by_id = {m.message_id: m for m in received}
    for m in by_id.values():
        assert m.source is Source.CHANNEL and m.chat_id == conversation
        assert m.place is not None and m.place.thread_id == asked.id
        assert (m.place.team_name, m.place.channel_name, m.place.thread_subject) == (
            "Engineering",
            "Ops",
            "Release 4.2",
        )
    push = build_channel_push(by_id[follow_up.id]).params
    assert (push.meta.team, push.meta.team_channel, push.meta.thread) == (
        "Engineering",
        "Ops",
        asked.id,
    )
    assert "Thread: Release 4.2" in push.content and "thanks!" in push.content
    assert "external_content" in push.content  # channel text is always enveloped


async def test_a_reply_in_an_old_thread_the_agent_answered_arrives(
    emulator: RunningEmulator,
    fleet: tuple[WorkerStack, WorkerStack, RecordingTarget, RecordingTarget],
) -> None:
    one, two, host_one, host_two = fleet
    ada = emulator.seed.humans[0]
    agent = emulator.seed.agent_user
    teams = emulator.state.teams
    ops = _channel(emulator, "Ops")
    conversation = channel_conversation_id(TEAM, ops)
    old = teams.post(TEAM, ops, sender_id=ada.id, content="old question", created=_ago(3 * 3600))
    teams.post(
        TEAM,
        ops,
        sender_id=agent.id,
        content="old answer",
        reply_to_id=old.id,
        created=_ago(2 * 3600),
    )
    await _discover(one)
    reply = teams.post(TEAM, ops, sender_id=ada.id, content="one more thing", reply_to_id=old.id)
    await _look((one, two), conversation)
    assert [m.message_id for m in host_one.received + host_two.received] == [reply.id]


async def test_a_channel_added_after_start_is_found_and_its_chatter_stays_unheard(
    emulator: RunningEmulator,
    fleet: tuple[WorkerStack, WorkerStack, RecordingTarget, RecordingTarget],
) -> None:
    one, two, host_one, host_two = fleet
    teams = emulator.state.teams
    grace, agent = emulator.seed.humans[1], emulator.seed.agent_user
    await _discover(one)
    later = teams.add_channel(TEAM, "Later")
    assert await _discover(one) == 1
    conversation = channel_conversation_id(TEAM, later.id)
    assert one.channels is not None
    await one.channels.watched.load()
    assert conversation in one.channels.watched
    hello = post_mention(teams, TEAM, later.id, sender_id=grace.id, agent=agent, text="hello")
    teams.post(TEAM, later.id, sender_id=grace.id, content="unaddressed chatter")
    await _look((one, two), conversation)
    assert [m.message_id for m in host_one.received + host_two.received] == [hello.id]


def _ago(seconds: int) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=seconds)


async def test_a_channel_the_agent_can_no_longer_read_is_settled_and_no_longer_hinted(
    emulator: RunningEmulator,
    fleet: tuple[WorkerStack, WorkerStack, RecordingTarget, RecordingTarget],
) -> None:
    one, _, _, _ = fleet
    assert one.channels is not None
    agent = emulator.seed.agent_user
    conversation = channel_conversation_id(TEAM, _channel(emulator, "Ops"))
    await _discover(one)
    emulator.state.teams.remove_member(TEAM, agent.id)
    await _look((one,), conversation)
    # Read as nothing new (Graph answers 403): the hint is settled, not retried every few seconds.
    assert one.channels.book.wanted(conversation) is None
    watch = _watch(one)
    now = [0.0]
    watch.monotonic = lambda: now[0]
    rotation_hints = one.metrics.changes.chat_hints_written.labels(source="channel_rotation")
    before = rotation_hints._value.get()
    await watch.cycle()  # the walk no longer finds the team's channels
    now[0] = 100.0  # two whole rotations of the two watched channels
    await watch.cycle()
    assert len(one.channels.watched) == 2  # still listed, no longer hinted
    assert rotation_hints._value.get() == before
    emulator.state.teams.add_member(TEAM, agent.id)  # back in the team: hinted again
    watch._walk.next_at = 0.0
    await watch.cycle()
    now[0] = 200.0
    await watch.cycle()
    assert rotation_hints._value.get() >= before + 2  # both channels come round again


async def test_a_rotation_hint_is_read_by_one_replica_for_the_fleet(
    emulator: RunningEmulator,
    fleet: tuple[WorkerStack, WorkerStack, RecordingTarget, RecordingTarget],
) -> None:
    one, two, host_one, host_two = fleet
    agent, ada = emulator.seed.agent_user, emulator.seed.humans[0]
    ops = _channel(emulator, "Ops")
    conversation = channel_conversation_id(TEAM, ops)
    await _discover(one)
    now = [0.0]
    for stack in (one, two):
        assert stack.channels is not None
        stack.channels.turns.spread_s = 1.6  # the service's default: turns apart, not all at once
        stack.channels.monotonic = lambda: now[0]
        await stack.channels.cycle()  # each joins the fleet's readers
    now[0] = 600.0  # long enough for each to know the other's turn
    asked = post_mention(emulator.state.teams, TEAM, ops, sender_id=ada.id, agent=agent, text="hi")
    await _look((one, two), conversation)
    now[0] += 10.0  # past every turn's wait
    for stack in (one, two):
        assert stack.channels is not None
        await stack.channels.cycle()
    outcomes = {
        id(stack): {
            o: stack.metrics.changes.conversation("channel").hints.labels(outcome=o)._value.get()
            for o in ("read", "first_turn")
        }
        for stack in (one, two)
    }
    reads = sorted((o["read"], o["first_turn"]) for o in outcomes.values())
    assert reads == [(0.0, 1.0), (1.0, 0.0)], outcomes  # one read for the fleet, one left to it
    assert [m.message_id for m in host_one.received + host_two.received] == [asked.id]


async def test_a_cold_start_gives_channels_their_first_watch_a_bounded_number_per_walk(
    emulator: RunningEmulator,
    fleet: tuple[WorkerStack, WorkerStack, RecordingTarget, RecordingTarget],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(channel_watch, "FIRST_WATCH_GAP_S", 0.0)
    one = fleet[0]
    for i in range(channel_watch.FIRST_WATCHES_PER_WALK + 3):  # beside General and Ops
        emulator.state.teams.add_channel(TEAM, f"Room {i}")
    watch = _watch(one)
    now = [0.0]
    watch.monotonic = lambda: now[0]
    await watch.cycle()
    assert len(watch.watched) == channel_watch.FIRST_WATCHES_PER_WALK
    now[0] = 1.0  # the rest a second later, not a discovery interval later
    await watch.cycle()
    assert len(watch.watched) == channel_watch.FIRST_WATCHES_PER_WALK + 5
    now[0] = 2.0
    await watch.cycle()  # nothing left: the next walk waits for the interval
    assert watch._walk.next_at == 1.0 + watch.discover_every_s
