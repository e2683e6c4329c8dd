"""Graph change notifications end to end: two real replicas (processes) whose notification URL is
their own loopback webhook, the Graph emulator over HTTP delivering the notifications, Azurite as
the shared store. Only the lease holder subscribes; a message a human posts reaches a push host with
the receiver's hint written and read; Graph's lifecycle events are answered; a mail notification
starts an email cycle that the poll's own schedule (an hour) would not have started."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from azure.storage.blob import BlobServiceClient
from prometheus_client.parser import text_string_to_metric_families

from emulator.seed import ThrottleBudget, build_seed
from emulator.state import Mention
from service.domain.channel_place import channel_conversation_id
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite
from service.devstack.channel_host import ChannelHost
from service.devstack.fleet import DEV_TOKEN, LocalFleet, ReplicaProcess
from service.devstack.traffic import HumanTraffic

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

BOUND_S = 60.0
ROLE = "subscription_manager"


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    seed = build_seed(chats=2, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500))
    with start_emulator(seed) as running:
        yield running


@pytest.fixture(scope="module")
def fleet(
    azurite: Azurite, emulator: RunningEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalFleet]:
    running = LocalFleet(
        emulator.seed,
        tmp_path_factory.mktemp("notifications"),
        replicas=2,
        azurite=azurite,
        emulator=emulator,
        extra_env={
            "ENTRABOT_NOTIFICATION_URL": "http://127.0.0.1:{port}/graph/notifications",
            "ENTRABOT_NOTIFICATION_CLIENT_STATE": "e2e-" + uuid.uuid4().hex,
            "ENTRABOT_CHAT_POLL_INTERVAL_S": "1",
            "ENTRABOT_CHAT_POLL_JITTER_S": "0",
            # Only a wake-up starts an email cycle within this test.
            "ENTRABOT_EMAIL_POLL_INTERVAL_S": "3600",
            # A team added within a test is watched within seconds (and then subscribed).
            "ENTRABOT_CHANNEL_DISCOVERY_INTERVAL_S": "2",
        },
    )
    running.start()
    yield running
    running.stop()


def metric(replica: ReplicaProcess, name: str, **labels: str) -> float:
    """A sample's value in the replica's /metrics (0 when absent)."""
    text = httpx.get(f"{replica.base_url}/metrics", timeout=10).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def admin_subscriptions(emulator: RunningEmulator) -> list[dict[str, Any]]:
    response = httpx.get(f"{emulator.base_url}/_emulator/subscriptions", timeout=10)
    response.raise_for_status()
    return list(response.json()["subscriptions"])


def by_kind(emulator: RunningEmulator, kind: str) -> list[dict[str, Any]]:
    return [s for s in admin_subscriptions(emulator) if s["kind"] == kind]


async def until(check: Callable[[], object], what: str) -> None:
    try:
        async with asyncio.timeout(BOUND_S):
            while not await asyncio.to_thread(check):
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"not reached within {BOUND_S:.0f} s: {what}") from None


def manager_cycles(replica: ReplicaProcess) -> float:
    return metric(replica, "entrabot_loop_cycles_total", loop="subscriptions", outcome="ok")


async def holder(fleet: LocalFleet, emulator: RunningEmulator) -> ReplicaProcess:
    """The lease holder, once both subscriptions exist."""
    await until(
        lambda: len(by_kind(emulator, "userChats")) == 1 and len(by_kind(emulator, "inbox")) == 1,
        "the chat and the Inbox subscriptions",
    )
    holding = [m for m in fleet.members if metric(m, "entrabot_lease_held", role=ROLE) == 1]
    assert len(holding) == 1, [m.name for m in holding]
    return holding[0]


async def test_only_the_lease_holder_creates_the_subscriptions(fleet, emulator) -> None:
    manager = await holder(fleet, emulator)
    # Every replica has run several manager cycles since: the other one had every chance to subscribe.
    after = {m.name: manager_cycles(m) for m in fleet.members}
    await until(
        lambda: all(manager_cycles(m) >= after[m.name] + 2 for m in fleet.members),
        "two more cycles each",
    )
    subs = admin_subscriptions(emulator)
    assert sorted(s["kind"] for s in subs) == ["inbox", "userChats"]
    agent = emulator.seed.agent_user.id
    assert {s["target"] for s in subs} == {agent}
    assert {s["notification_url"] for s in subs} == {f"{manager.base_url}/graph/notifications"}
    assert {s["lifecycle_notification_url"] for s in subs} == {
        f"{manager.base_url}/graph/notifications"
    }
    for member in fleet.members:
        created = metric(
            member, "entrabot_notification_subscription_changes_total", action="created"
        )
        assert created == (2 if member is manager else 0), member.name
    assert metric(manager, "entrabot_notification_subscriptions", resource="chat") == 1
    assert metric(manager, "entrabot_notification_subscriptions", resource="mail") == 1


def hint_lines(fleet: LocalFleet) -> str:
    assert fleet.azurite is not None
    client = BlobServiceClient.from_connection_string(fleet.azurite.connection_string)
    try:
        container = client.get_container_client(fleet.container)
        return "".join(
            container.download_blob(b.name).readall().decode()
            for b in container.list_blobs(name_starts_with="hints/")
        )
    finally:
        client.close()


async def test_a_message_a_human_posts_is_hinted_by_its_notification_and_pushed(
    fleet, emulator
) -> None:
    manager = await holder(fleet, emulator)
    reader = next(
        m for m in fleet.members if m is not manager
    )  # hints reach every replica, not only the receiver
    stop = asyncio.Event()
    host = ChannelHost("py", [reader.mcp_url], token=DEV_TOKEN)
    task = asyncio.create_task(host.run(stop))
    try:
        await until(lambda: host.connected_to, "the host to connect")
        read_before = sum(
            metric(reader, "entrabot_chat_hints_total", outcome=o) for o in ("read", "covered")
        )
        chat = emulator.seed.chats[1].id or ""
        async with httpx.AsyncClient(timeout=30) as http:
            posted = await HumanTraffic(emulator.seed, emulator.base_url, http).post_chat(
                emulator.seed.humans[1], chat, "notified " + uuid.uuid4().hex
            )
        await until(lambda: posted.message_id in {p.message_id for p in host.pushes}, "the push")
        # The holder's receiver wrote a hint naming this message (from the notification, not a scan)...
        await until(lambda: f'"m":"{posted.message_id}"' in hint_lines(fleet), "the hint")
        line = next(x for x in hint_lines(fleet).splitlines() if f'"m":"{posted.message_id}"' in x)
        assert f'"c":"{chat}"' in line and '"s":"notification"' in line
        assert (
            metric(manager, "entrabot_graph_notifications_total", kind="chat", outcome="hinted")
            >= 1
        )
        # ...and the other replica's chat poll read the hinted chat.
        await until(
            lambda: (
                sum(
                    metric(reader, "entrabot_chat_hints_total", outcome=o)
                    for o in ("read", "covered")
                )
                > read_before
            ),
            "the hint read",
        )
    finally:
        stop.set()
        await task


async def test_a_removed_subscription_is_created_again(fleet, emulator) -> None:
    manager = await holder(fleet, emulator)
    [old] = by_kind(emulator, "userChats")
    response = httpx.post(
        f"{emulator.base_url}/_emulator/subscriptions/{old['id']}/lifecycle",
        json={"event": "subscriptionRemoved"},
        timeout=10,
    )
    assert response.json()["sent"] is True
    await until(
        lambda: [s["id"] for s in by_kind(emulator, "userChats")] not in ([], [old["id"]]),
        "a new chat subscription",
    )
    assert (
        metric(
            manager,
            "entrabot_notification_subscription_changes_total",
            resource="chat",
            action="recreated",
        )
        >= 1
    )


async def test_reauthorization_required_is_answered_by_reauthorizing(fleet, emulator) -> None:
    manager = await holder(fleet, emulator)
    [mail] = by_kind(emulator, "inbox")

    def reauthorized() -> float:
        return metric(
            manager,
            "entrabot_notification_subscription_changes_total",
            resource="mail",
            action="reauthorized",
        )

    before = reauthorized()
    # Forced, Graph pauses the subscription's notifications until the app reauthorizes.
    response = httpx.post(
        f"{emulator.base_url}/_emulator/subscriptions/{mail['id']}/lifecycle",
        json={"event": "reauthorizationRequired"},
        timeout=10,
    )
    assert response.json()["sent"] is True
    await until(lambda: reauthorized() > before, "the manager's reauthorization")
    [now] = by_kind(emulator, "inbox")
    assert (
        now["id"] == mail["id"] and now["reauthorization_sent"] is False
    )  # the same subscription, live again


async def test_a_mail_notification_starts_an_email_cycle(fleet, emulator) -> None:
    manager = await holder(fleet, emulator)  # Graph notifies the URL the holder subscribed with
    stop = asyncio.Event()
    host = ChannelHost("py", [manager.mcp_url], token=DEV_TOKEN)
    task = asyncio.create_task(host.run(stop))
    try:
        await until(lambda: host.connected_to, "the host to connect")
        # The host's arrival wakes the email poll once (its baseline); an hour passes before the next.
        await until(
            lambda: (
                metric(manager, "entrabot_loop_cycles_total", loop="email_poll", outcome="ok") >= 2
            ),
            "the email cycle a host's arrival starts",
        )
        cycles = metric(manager, "entrabot_loop_cycles_total", loop="email_poll", outcome="ok")
        mail_before = metric(
            manager, "entrabot_graph_notifications_total", kind="mail", outcome="accepted"
        )
        token = uuid.uuid4().hex
        agent = emulator.seed.agent_user
        async with httpx.AsyncClient(timeout=30) as http:
            await HumanTraffic(emulator.seed, emulator.base_url, http).send_mail(
                emulator.seed.humans[1], agent.address, f"Notified {token}", f"Hello {token}"
            )
        # Within the poll's settle margin the first woken cycle leaves the mail; the second wake takes it.
        await until(lambda: any(token in p.content for p in host.pushes), "the mail's push")
        assert (
            metric(manager, "entrabot_graph_notifications_total", kind="mail", outcome="accepted")
            > mail_before
        )
        assert (
            metric(manager, "entrabot_loop_cycles_total", loop="email_poll", outcome="ok") > cycles
        )
    finally:
        stop.set()
        await task


def blob_names(fleet: LocalFleet, prefix: str) -> list[str]:
    assert fleet.azurite is not None
    client = BlobServiceClient.from_connection_string(fleet.azurite.connection_string)
    try:
        container = client.get_container_client(fleet.container)
        return [b.name for b in container.list_blobs(name_starts_with=prefix)]
    finally:
        client.close()


async def test_a_channel_message_is_hinted_by_its_channel_subscription_and_pushed(
    fleet, emulator
) -> None:
    """A team the agent joins is watched and subscribed channel by channel; a message posted in its
    channel comes back as a notification, a channel hint naming <team>/<channel> with the message's
    id, and a mention of the agent reaches the push host."""
    manager = await holder(fleet, emulator)
    teams, agent, ada = emulator.state.teams, emulator.seed.agent_user, emulator.seed.humans[1]
    team = teams.add_team("Notified " + uuid.uuid4().hex[:8], [agent.id, ada.id])
    [general] = teams.channels(team.id, agent.id)
    conversation = channel_conversation_id(team.id, general.id)
    await until(
        lambda: any(s["target"] == conversation for s in by_kind(emulator, "channel")),
        "the channel's subscription",
    )
    stop = asyncio.Event()
    host = ChannelHost("py", [manager.mcp_url], token=DEV_TOKEN)
    task = asyncio.create_task(host.run(stop))
    try:
        await until(lambda: host.connected_to, "the host to connect")
        # The first message only sets the channel's cursor (first sight never surfaces).
        first = teams.post(team.id, general.id, sender_id=ada.id, content="morning")
        await until(lambda: f'"m":"{first.id}"' in hint_lines(fleet), "the first message's hint")
        line = next(x for x in hint_lines(fleet).splitlines() if f'"m":"{first.id}"' in x)
        assert '"k":"channel"' in line and '"s":"notification"' in line
        assert f'"c":"{conversation}"' in line
        await until(lambda: blob_names(fleet, "channel_cursors/"), "the channel's cursor")
        name = agent.display_name
        asked = teams.post(
            team.id,
            general.id,
            sender_id=ada.id,
            content=f'<at id="0">{name}</at> can you look? ' + uuid.uuid4().hex,
            content_type="html",
            mentions=[Mention(0, name, agent.id, name)],
        )
        await until(lambda: f'"m":"{asked.id}"' in hint_lines(fleet), "the mention's hint")
        await until(lambda: asked.id in {p.message_id for p in host.pushes}, "the mention's push")
        assert (
            metric(manager, "entrabot_graph_notifications_total", kind="channel", outcome="hinted")
            >= 2
        )
        assert metric(manager, "entrabot_notification_subscriptions", resource="channel") >= 1
    finally:
        stop.set()
        await task


async def test_when_the_holder_stops_the_other_replica_takes_the_role_and_subscribes_for_itself(
    fleet, emulator
) -> None:
    """Last in this module: it stops a replica. The lease expires (no renewal), the other replica
    takes it and, finding subscriptions aimed at a URL that is not its own, replaces them."""
    manager = await holder(fleet, emulator)
    successor = next(m for m in fleet.members if m is not manager)
    manager.terminate()
    own = f"{successor.base_url}/graph/notifications"
    await until(lambda: metric(successor, "entrabot_lease_held", role=ROLE) == 1, "the takeover")
    await until(
        lambda: (
            {s["notification_url"] for s in admin_subscriptions(emulator)} == {own}
            and len(by_kind(emulator, "userChats")) == 1
            and len(by_kind(emulator, "inbox")) == 1
        ),
        "subscriptions aimed at the successor",
    )
    assert metric(successor, "entrabot_lease_events_total", role=ROLE, event="taken_over") == 1
