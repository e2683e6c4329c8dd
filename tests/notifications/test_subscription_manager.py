"""The subscription manager against the Graph emulator over HTTP (a real loopback receiver answers
Graph's validation), with its record, lease and lifecycle events on a LocalBackend: only a lease
holder acts, a subscription gone at renewal is created again, and a ``missed`` on the Inbox nudges
an email cycle once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import asyncio

import pytest
from starlette.applications import Starlette
from worker_stack import WorkerStack, build_stack

from emulator.faults import FaultRule
from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.clock import utc_now
from service.domain.channel_place import channel_conversation_id
from service.domain.conversation import TEAM_CHANNELS
from service.ledger.fleet.hints import Hint, HintReader
from service.ledger.memory.watched_chats import render_watched_chats
from service.devstack.uvicorn_runner import serve_app
from service.ledger.fleet.leases import Lease
from service.notifications.lifecycle_log import LifecycleEvent, record_event
from service.notifications.options import NotificationOptions
from service.notifications.receiver import NOTIFICATIONS_PATH
from service.notifications.subscription_record import (
    CHAT_KEY,
    MAIL_KEY,
    RECORD_KEY,
    parse_record,
    render_record,
)
from service.notifications.subscriptions import ROLE, SubscriptionManager
from service.notifications.wiring import Notifications
from service.storage.local import LocalBackend
from service.telemetry.metrics import RoleMetrics


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(
        build_seed(chats=1, throttle=ThrottleBudget(chat_messages_per_s=1000, other_per_s=1000))
    ) as running:
        yield running


class World:
    def __init__(
        self,
        emulator: RunningEmulator,
        backend: LocalBackend,
        stack: WorkerStack,
        notifications: Notifications,
    ) -> None:
        self.emulator, self.backend, self.stack, self.notifications = (
            emulator,
            backend,
            stack,
            notifications,
        )
        self.mail_nudges = 0

    def manager(self, replica_id: str = "replica-a") -> SubscriptionManager:
        lease = Lease(self.backend, ROLE, replica_id, metrics=self.stack.metrics.roles)
        manager = self.notifications.manager(
            self.stack.graph, self.emulator.seed.agent_user.id, lease
        )
        manager.on_mail_missed = self._nudged
        return manager

    def _nudged(self) -> None:
        self.mail_nudges += 1

    def live_channels(self) -> dict[str, str]:
        """ "team/channel" -> id of the channel subscriptions Graph holds."""
        return {
            s.ref.target: s.id
            for s in self.emulator.context.subscriptions.active()
            if s.ref.kind.value == "channel"
        }

    async def watch_channels(self, *conversation_ids: str) -> None:
        await self.backend.write_text(
            TEAM_CHANNELS.watched_key, render_watched_chats(conversation_ids)
        )

    def live(self) -> dict[str, str]:
        """kind -> id of the subscriptions Graph holds."""
        return {s.ref.kind.value: s.id for s in self.emulator.context.subscriptions.active()}

    def changes(self, resource: str, action: str) -> float:
        return (
            self.stack.metrics.registry.get_sample_value(
                "entrabot_notification_subscription_changes_total",
                {"resource": resource, "action": action},
            )
            or 0.0
        )


@pytest.fixture
async def world(emulator: RunningEmulator, tmp_path: Path) -> AsyncIterator[World]:
    backend = LocalBackend(tmp_path / "state")
    stack = await build_stack(emulator, backend, is_cloud=False)
    app = Starlette()
    async with serve_app(app) as server:
        url = f"{server.base_url}{NOTIFICATIONS_PATH}"
        options = NotificationOptions(url, url, "manager-test-state", max_concurrent=32)
        notifications = Notifications(options, backend, stack.metrics.changes)
        app.router.routes.extend(notifications.receiver.routes())
        yield World(emulator, backend, stack, notifications)
    await stack.aclose()


async def test_a_replica_without_the_lease_creates_nothing(world) -> None:
    other = Lease(world.backend, ROLE, "replica-b", metrics=RoleMetrics())
    await other.acquire_or_renew()
    await world.manager("replica-a").cycle()
    assert world.live() == {}
    assert await world.backend.read_text(RECORD_KEY) is None


async def test_the_holder_subscribes_once_and_keeps_what_it_made(world) -> None:
    manager = world.manager()
    await manager.cycle()
    await manager.cycle()
    live = world.live()
    assert set(live) == {"userChats", "inbox"}
    record = parse_record(await world.backend.read_text(RECORD_KEY) or "")
    assert {k: v.id for k, v in record.kept.items()} == {
        CHAT_KEY: live["userChats"],
        MAIL_KEY: live["inbox"],
    }
    assert world.changes("chat", "created") == 1 and world.changes("mail", "created") == 1


async def test_a_subscription_gone_at_renewal_is_created_again(world) -> None:
    manager = world.manager()
    await manager.cycle()
    gone = world.live()["userChats"]
    await world.stack.graph.subscriptions.delete_subscription(
        gone
    )  # Graph lost it without telling anyone
    record = parse_record(await world.backend.read_text(RECORD_KEY) or "")
    due = replace(
        record.kept[CHAT_KEY], expires_at=record.kept[CHAT_KEY].expires_at - timedelta(days=2)
    )
    await world.backend.write_text(
        RECORD_KEY, render_record(replace(record, kept={**record.kept, CHAT_KEY: due}))
    )
    await manager.cycle()
    assert world.live()["userChats"] != gone
    assert world.changes("chat", "recreated") == 1
    kept = parse_record(await world.backend.read_text(RECORD_KEY) or "").kept
    assert kept[CHAT_KEY].id == world.live()["userChats"]


async def test_a_missed_on_the_inbox_nudges_one_email_cycle(world) -> None:
    manager = world.manager()
    await manager.cycle()
    mail = world.live()["inbox"]
    await record_event(world.backend, LifecycleEvent(mail, "missed", utc_now()))
    await manager.cycle()
    await manager.cycle()  # the event is behind the recorded offset now
    assert world.mail_nudges == 1


async def test_a_removal_answered_while_graph_refuses_creation_is_acted_on_once_graph_answers(
    world,
) -> None:
    manager = world.manager()
    await manager.cycle()
    removed = world.live()["userChats"]
    await world.stack.graph.subscriptions.delete_subscription(removed)
    await record_event(world.backend, LifecycleEvent(removed, "subscriptionRemoved", utc_now()))
    world.emulator.context.faults.add(
        FaultRule(status=503, route_pattern=r"/subscriptions$", method="POST", count=1)
    )
    await manager.cycle()  # the creation fails: the event must not be forgotten
    assert "userChats" not in world.live() and world.changes("chat", "failed") == 1
    await manager.cycle()
    assert world.live()["userChats"] != removed and world.changes("chat", "recreated") == 1


async def hints_until(reader: HintReader, wanted: Callable[[list[Hint]], bool]) -> list[Hint]:
    seen: list[Hint] = []
    async with asyncio.timeout(10):
        while not wanted(seen):
            seen += await reader.poll() or []
            await asyncio.sleep(0.05)
    return seen


async def test_a_message_and_a_reply_in_a_watched_channel_are_hinted_through_its_subscription(
    world,
) -> None:
    """The manager subscribes to the watched channel; the emulator notifies the receiver of a root
    and of a reply, and each becomes a channel hint naming <team>/<channel> within seconds."""
    teams, agent, ada = (
        world.emulator.state.teams,
        world.emulator.seed.agent_user,
        world.emulator.seed.humans[0],
    )
    team = teams.add_team("Ops", [agent.id, ada.id])
    [general] = teams.channels(team.id, agent.id)
    conversation = channel_conversation_id(team.id, general.id)
    await world.watch_channels(conversation)
    await world.manager().cycle()
    assert set(world.live_channels()) == {conversation}
    assert world.changes("channel", "created") == 1
    record = parse_record(await world.backend.read_text(RECORD_KEY) or "")
    assert {k.text for k in record.kept} == {"chat", "mail", f"channel:{conversation}"}

    reader = HintReader(world.backend)
    await reader.poll()  # nothing before the posts
    root = teams.post(team.id, general.id, sender_id=ada.id, content="anyone on call?")
    reply = teams.post(team.id, general.id, sender_id=ada.id, content="ping", reply_to_id=root.id)
    hints = await hints_until(reader, lambda seen: len(seen) >= 2)
    assert {(h.chat_id, h.message_id, h.kind, h.source) for h in hints} == {
        (conversation, root.id, "channel", "notification"),
        (conversation, reply.id, "channel", "notification"),
    }


async def test_a_channel_that_leaves_the_list_is_unsubscribed_and_the_gauge_counts_channels(
    world,
) -> None:
    teams, agent = world.emulator.state.teams, world.emulator.seed.agent_user
    team = teams.add_team("Ops", [agent.id])
    later = teams.add_channel(team.id, "Later")
    [general_id] = [c.id for c in teams.channels(team.id, agent.id) if c.id != later.id]
    both = [channel_conversation_id(team.id, c) for c in (general_id, later.id)]
    await world.watch_channels(*both)
    manager = world.manager()
    await manager.cycle()
    assert set(world.live_channels()) == set(both)
    gauge = world.stack.metrics.registry.get_sample_value
    assert gauge("entrabot_notification_subscriptions", {"resource": "channel"}) == 2
    assert gauge("entrabot_notification_subscriptions", {"resource": "chat"}) == 1

    await world.watch_channels(both[0])
    await manager.cycle()
    assert set(world.live_channels()) == {both[0]}
    assert world.changes("channel", "deleted") == 1
    kept = parse_record(await world.backend.read_text(RECORD_KEY) or "").kept
    assert {k.conversation_id for k in kept if k.conversation_id} == {both[0]}
    assert gauge("entrabot_notification_subscriptions", {"resource": "channel"}) == 1


async def test_a_record_from_before_channels_is_kept_and_only_the_channels_are_added(world) -> None:
    manager = world.manager()
    await manager.cycle()
    before = world.live()
    # The previous version's record: only "chat" and "mail" keys (render_record writes just those).
    record = parse_record(await world.backend.read_text(RECORD_KEY) or "")
    assert set(record.kept) == {CHAT_KEY, MAIL_KEY}
    teams, agent = world.emulator.state.teams, world.emulator.seed.agent_user
    team = teams.add_team("Ops", [agent.id])
    [general] = teams.channels(team.id, agent.id)
    await world.watch_channels(channel_conversation_id(team.id, general.id))
    await manager.cycle()
    after = world.live()
    assert after["userChats"] == before["userChats"] and after["inbox"] == before["inbox"]
    assert world.changes("chat", "created") == 1 and world.changes("chat", "recreated") == 0
    assert len(world.live_channels()) == 1
