"""The subscription manager against the Graph emulator over HTTP (a real loopback receiver answers
Graph's validation), with its record, lease and lifecycle events on a LocalBackend: only a lease
holder acts, a subscription gone at renewal is created again, and a ``missed`` on the Inbox nudges
an email cycle once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from starlette.applications import Starlette
from worker_stack import WorkerStack, build_stack

from emulator.faults import FaultRule
from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.clock import utc_now
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
