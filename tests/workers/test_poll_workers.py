"""The poll workers end to end: the Graph emulator over real HTTP, the ledger on Azurite."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from seed_ids import seeded_chat_id
from settings_env import settings_from_env
from worker_stack import RecordingTarget, WorkerStack, build_stack

from emulator.faults import FaultRule
from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.delivery.hub import TargetKind
from service.devstack.emulator_env import agent_user_env
from service.domain.message import InboundMessage
from service.from_settings.graph_auth import token_provider_from_settings
from service.graph import GraphClient, GraphOptions, GraphServerError, new_http_client
from service.graph.retry_policy import RetryPolicy
from service.ledger.claims.email_cursor import EMAIL_CURSOR_KEY, parse_email_cursor
from service.ledger.fleet.graph_backoff import FleetBackoff
from service.ledger.fleet.poll_turns import turn_key
from service.storage.blob import BlobBackend
from service.storage.faults import Fault, FaultyBackend
from service.storage.faults import FaultRule as StorageFaultRule
from service.telemetry.metrics import GraphMetrics, LedgerMetrics, RoleMetrics
from service.workers.email_poll import EmailPoller

pytestmark = pytest.mark.azurite

# Not about Graph's limits (tests/emulator/test_emulator_limits.py is): no limit in the way.
ROOMY = ThrottleBudget.relaxed()

QUICK_RETRIES = RetryPolicy(max_attempts=2, max_retry_after=1.0, backoff_base=0.05, backoff_cap=0.2)


def now() -> datetime:
    return datetime.now(timezone.utc)


@pytest.fixture
def emulator(request: pytest.FixtureRequest) -> Iterator[RunningEmulator]:
    chats = getattr(request, "param", 3)
    with start_emulator(build_seed(chats=chats, throttle=ROOMY)) as running:
        yield running


@pytest.fixture
def backend(blob_backend: BlobBackend) -> BlobBackend:
    return blob_backend


@pytest.fixture
async def stack(emulator: RunningEmulator, backend: BlobBackend) -> AsyncIterator[WorkerStack]:
    built = await build_stack(emulator, backend, is_cloud=True)
    yield built
    await built.aclose()


def human(emulator: RunningEmulator, index: int = 0) -> str:
    return emulator.seed.humans[index].id


def chat_ids(emulator: RunningEmulator) -> list[str]:
    return [seeded_chat_id(emulator.seed, n) for n in range(len(emulator.seed.chats))]


def message_polls(emulator: RunningEmulator) -> int:
    return sum(
        1 for r in emulator.stats.snapshot()["recent"] if r["route"] == "/v1.0/chats/{id}/messages"
    )


def polled_chats(emulator: RunningEmulator) -> list[str]:
    return [
        r["path"].split("/")[3]
        for r in emulator.stats.snapshot()["recent"]
        if r["route"] == "/v1.0/chats/{id}/messages"
    ]


async def connect(stack: WorkerStack) -> RecordingTarget:
    target = RecordingTarget()
    stack.hub.register(target)
    await stack.discovery.cycle()
    return target


async def test_a_worker_stacks_retry_after_holds_the_other_replicas_of_the_fleet(
    emulator: RunningEmulator, backend: BlobBackend
) -> None:
    """The harness builds its Graph client as the replica does (``build_clients``), fleet hold included."""
    stack = await build_stack(
        emulator, backend, is_cloud=True, retry_policy=RetryPolicy(max_attempts=1)
    )
    try:
        await (
            stack.graph.directory.get_me()
        )  # tokens and connections first: the fault below is the next request
        emulator.context.faults.add(
            FaultRule(status=503, route_pattern="^/v1.0/me$", count=1, retry_after=30)
        )
        with pytest.raises(GraphServerError):
            await stack.graph.directory.get_me()
        await asyncio.wait_for(stack.graph_backoff.announced(), timeout=5)
        await stack.graph_backoff.cycle()  # what the replica's backoff loop does when woken
        other = FleetBackoff(
            backend, "replica-b", metrics=RoleMetrics(), ledger_metrics=LedgerMetrics()
        )
        await other.cycle()
        assert other.held_until() > time.time()
    finally:
        await stack.aclose()


async def test_a_burst_of_120_messages_between_two_cycles_is_delivered_once_in_order(
    stack, emulator
):
    target = await connect(stack)
    chat = chat_ids(emulator)[0]
    await stack.chats.cycle()  # first sight: the chat's cursor is created
    posted = [
        emulator.state.post_message(chat, sender_id=human(emulator), content=f"burst {i}").id
        for i in range(120)
    ]
    await stack.chats.cycle()
    await stack.chats.cycle()  # a second steady cycle finds nothing more
    assert target.ids == posted


async def test_a_chat_whose_history_is_a_week_old_surfaces_nothing(stack, emulator):
    old_chat, fresh_chat, _ = chat_ids(emulator)
    emulator.state.post_message(
        old_chat,
        sender_id=human(emulator),
        content="stale order",
        created=now() - timedelta(days=7),
    )
    fresh = emulator.state.post_message(
        fresh_chat, sender_id=human(emulator), content="hello", created=now() - timedelta(hours=1)
    )
    target = await connect(stack)
    emulator.stats.reset()
    await stack.chats.cycle()
    await stack.chats.cycle()
    assert target.ids == [fresh.id]
    assert old_chat not in polled_chats(emulator)  # its preview alone says it is too old to surface


async def test_system_messages_and_the_agents_own_messages_are_never_delivered(stack, emulator):
    target = await connect(stack)
    chat = chat_ids(emulator)[1]
    await stack.chats.cycle()
    emulator.state.post_message(
        chat,
        sender_id=None,
        content="",
        message_type="systemEventMessage",
        event_detail={"@odata.type": "#microsoft.graph.membersAddedEventMessageDetail"},
    )
    emulator.state.post_message(
        chat, sender_id=emulator.seed.agent_user.id, content="from the agent itself"
    )
    person = emulator.state.post_message(chat, sender_id=human(emulator), content="from a person")
    await stack.chats.cycle()
    assert target.ids == [person.id]


async def test_a_chat_answering_500_does_not_delay_the_other_chats(stack, emulator):
    target = await connect(stack)
    broken, healthy, _ = chat_ids(emulator)
    await stack.chats.cycle()
    emulator.context.faults.add(
        FaultRule(status=500, route_pattern=f"/chats/{re.escape(broken)}/messages")
    )
    lost_meanwhile = emulator.state.post_message(broken, sender_id=human(emulator), content="waits")
    delivered = emulator.state.post_message(
        healthy, sender_id=human(emulator), content="goes through"
    )
    await stack.chats.cycle()
    assert target.ids == [delivered.id]
    emulator.context.faults.clear()
    for _ in range(100):  # bounded: the failed chat is retried a couple of seconds later
        await stack.chats.cycle()
        if len(target.ids) > 1:
            break
        await asyncio.sleep(0.1)
    assert target.ids == [delivered.id, lost_meanwhile.id]  # nothing was lost to the failure


async def test_120_mails_arriving_within_one_cycle_are_all_delivered_once(stack, emulator):
    target = await connect(stack)
    await stack.email.cycle()  # the cloud cursor starts at "now"
    start = now()
    sent = [
        emulator.state.deliver_mail(
            to=emulator.seed.agent_user.id,
            from_address="ada.partner@fabrikam.com",
            subject=f"order {i}",
            body="please ship",
            received=start + timedelta(seconds=1 + i // 40),
        ).id
        for i in range(120)
    ]
    stack.email.clock = lambda: start + timedelta(minutes=1)  # the next cycle, a minute later
    await stack.email.cycle()
    await stack.email.cycle()
    assert sorted(target.ids) == sorted(sent) and len(target.ids) == 120


def mailbox_reads(emulator: RunningEmulator) -> int:
    return sum(1 for r in emulator.stats.snapshot()["recent"] if "/mailFolders/" in r["route"])


async def test_the_fleet_polls_the_mailbox_once_an_interval_and_a_mail_notification_polls_at_once(
    emulator, backend
):
    """Two replicas with live targets: the second finds the first's poll fresh and makes no Graph
    request (the fleet costs Graph one mailbox poll a minute, not one per replica); a mail
    notification makes it poll all the same."""
    first = await build_stack(emulator, backend, is_cloud=True)
    second = await build_stack(emulator, backend, is_cloud=True, replica_id="second-replica")
    try:
        await connect(first)
        second_target = await connect(second)
        await first.email.cycle()  # the cloud cursor starts at "now"
        for stack in (first, second):
            assert stack.email.turn is not None
            stack.email.turn.interval = timedelta(minutes=1)
        # The fleet's last poll was two minutes ago.
        await backend.write_text(
            turn_key("email_poll"),
            json.dumps({"at": (now() - timedelta(minutes=2)).isoformat(), "by": "test"}),
        )
        emulator.stats.reset()
        await first.email.cycle()
        assert mailbox_reads(emulator) == 1
        await second.email.cycle()
        assert mailbox_reads(emulator) == 1  # polled by the fleet within the minute: nothing to do
        start = now()
        mail = emulator.state.deliver_mail(
            to=emulator.seed.agent_user.id,
            from_address="ada.partner@fabrikam.com",
            subject="announced",
            body="b",
            received=start + timedelta(seconds=1),
        )
        second.email.clock = lambda: (
            start + timedelta(seconds=10)
        )  # the mail is past the settle margin
        second.email.poll_now()  # Graph announced it
        await second.email.cycle()
        assert mailbox_reads(emulator) == 2 and second_target.ids == [mail.id]
        await second.email.cycle()
        assert (
            mailbox_reads(emulator) == 2
        )  # the announcement was one poll, not a standing exemption
    finally:
        await first.aclose()
        await second.aclose()


@pytest.mark.parametrize(
    "graph_fault",
    [{"status": 429, "retry_after": 0}, {"status": 503}],
    ids=["throttled", "server_error"],
)
async def test_a_held_mail_batch_settled_as_ours_is_delivered_when_the_same_cycles_mailbox_read_fails(
    emulator, backend, graph_fault
):
    faulty = FaultyBackend(backend)
    # The read fails after a few quick retries: this test is about what the cycle does then.
    stack = await build_stack(emulator, faulty, is_cloud=True, retry_policy=QUICK_RETRIES)
    try:
        target = await connect(stack)
        await stack.email.cycle()  # the cloud cursor starts at "now"
        start = now()
        agent = emulator.seed.agent_user.id
        held = emulator.state.deliver_mail(
            to=agent,
            from_address="ada.partner@fabrikam.com",
            subject="held",
            body="b",
            received=start + timedelta(seconds=1),
        )
        stack.email.clock = lambda: start + timedelta(minutes=1)
        # The claim commits but its answer is lost, and every read-back fails: the batch is held.
        cursor = "poll_state/email_cursor.txt"
        faulty.add(
            StorageFaultRule(Fault.WRITE_RESPONSE_LOST, key=cursor, times=1),
            StorageFaultRule(Fault.READ_FAILS, key=cursor, skip=1, times=3),
        )
        await stack.email.cycle()
        assert target.ids == [] and stack.email.claimer.held is not None
        # The store recovers, so the hold settles as ours; the mailbox read of that same cycle fails.
        later = emulator.state.deliver_mail(
            to=agent,
            from_address="ada.partner@fabrikam.com",
            subject="later",
            body="b",
            received=start + timedelta(seconds=2),
        )
        added = await stack.http.post(
            f"{emulator.base_url}/_emulator/faults",
            json={"route_pattern": "/mailFolders/", **graph_fault},
        )
        assert added.status_code == 201
        await stack.email.cycle()
        assert target.ids == [held.id]
        await stack.http.delete(f"{emulator.base_url}/_emulator/faults")
        await stack.email.cycle()
        assert target.ids == [held.id, later.id]
    finally:
        await stack.aclose()


class UnreadableMail(httpx.AsyncBaseTransport):
    """Real HTTP to the emulator, with every mail of an inbox page given a receivedDateTime that is
    not a time: mail the service's models cannot parse, as Graph might send after a schema change."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if request.method != "GET" or "/mailFolders/" not in request.url.path:
            return response
        body = json.loads(await response.aread())
        for mail in body.get("value", []):
            mail["receivedDateTime"] = {"not": "a time"}
        return httpx.Response(
            response.status_code, headers={"content-type": "application/json"}, json=body
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def email_poller_reading_through(
    stack: WorkerStack,
    settings_env: dict[str, str],
    transport: httpx.AsyncBaseTransport | None = None,
) -> AsyncIterator[EmailPoller]:
    """The stack's email poller (its claimer, hub and recorder: the same hold) with its own Graph
    client and connection pool, built from these settings as the replica builds its own (the read
    timeout is ENTRABOT_GRAPH_TIMEOUT_S); four attempts per read as in the service, without seconds of
    backoff between them. Tokens come over the stack's pool: only Graph's answers meet the timeout."""
    settings = settings_from_env(
        {**agent_user_env(stack.emulator.seed, base_url=stack.emulator.base_url), **settings_env}
    )
    http = (
        new_http_client(read_timeout_s=settings.graph_timeout_s)
        if transport is None
        else httpx.AsyncClient(transport=transport, timeout=settings.graph_timeout_s)
    )
    graph = GraphClient(
        GraphOptions(settings.graph_url, retry=RetryPolicy(backoff_base=0.02)),
        token_provider_from_settings(settings, stack.http, metrics=GraphMetrics()),
        http=http,
        metrics=GraphMetrics(),
    )
    async with http:
        yield dataclasses.replace(stack.email, graph=graph)


async def hold_a_mail_batch(stack: WorkerStack, faulty: FaultyBackend) -> tuple[str, datetime]:
    """A mail claimed by a write that commits but whose answer is lost, every read-back failing: the
    batch is held. Returns the held mail's id and the time the mail arrives after."""
    await stack.email.cycle()  # the cloud cursor starts at "now"
    start = now()
    held = stack.emulator.state.deliver_mail(
        to=stack.emulator.seed.agent_user.id,
        subject="held",
        body="b",
        from_address="ada.partner@fabrikam.com",
        received=start + timedelta(seconds=1),
    )
    stack.email.clock = lambda: start + timedelta(minutes=1)
    cursor = "poll_state/email_cursor.txt"
    faulty.add(
        StorageFaultRule(Fault.WRITE_RESPONSE_LOST, key=cursor, times=1),
        StorageFaultRule(Fault.READ_FAILS, key=cursor, skip=1, times=3),
    )
    await stack.email.cycle()
    assert stack.email.claimer.held is not None
    return held.id, start


@pytest.mark.parametrize("failure", ["timeout", "unreadable_mail"])
async def test_a_held_mail_batch_settled_as_ours_is_delivered_when_the_same_cycles_mailbox_read_times_out_or_is_unreadable(
    emulator: RunningEmulator, backend: BlobBackend, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    faulty = FaultyBackend(backend)
    stack = await build_stack(emulator, faulty, is_cloud=True)
    try:
        target = await connect(stack)
        held, start = await hold_a_mail_batch(stack, faulty)
        assert target.ids == []
        later = emulator.state.deliver_mail(
            to=emulator.seed.agent_user.id,
            from_address="ada.partner@fabrikam.com",
            subject="later",
            body="b",
            received=start + timedelta(seconds=2),
        )
        # The store has recovered, so the hold settles as ours; the mailbox read of that same cycle fails.
        if failure == "timeout":
            # Graph answers each inbox read only after the client's read timeout, on every attempt.
            added = await stack.http.post(
                f"{emulator.base_url}/_emulator/faults",
                json={"route_pattern": "/mailFolders/", "status": None, "latency_ms": 3_000},
            )
            assert added.status_code == 201
            reader = email_poller_reading_through(stack, {"ENTRABOT_GRAPH_TIMEOUT_S": "0.5"})
            expected_error = "GraphConnectionError"
        else:
            reader = email_poller_reading_through(stack, {}, UnreadableMail())
            expected_error = "GraphPayloadError"
        async with reader as failing_poller:
            with caplog.at_level(logging.WARNING, logger="service.workers.email_poll"):
                await failing_poller.cycle()
        assert target.ids == [held]
        [failed] = [r for r in caplog.records if r.getMessage().startswith("mailbox read failed")]
        assert vars(failed).get("error") == expected_error  # the structured field of the warning
        await stack.http.delete(f"{emulator.base_url}/_emulator/faults")
        await stack.email.cycle()
        assert target.ids == [held, later.id]
    finally:
        await stack.aclose()


async def test_with_no_delivery_target_the_replica_makes_no_message_poll_calls(stack, emulator):
    await stack.discovery.cycle()
    emulator.stats.reset()
    for chat in chat_ids(emulator):
        emulator.state.post_message(chat, sender_id=human(emulator), content="nobody is listening")
    await stack.chats.cycle()
    await stack.email.cycle()
    assert message_polls(emulator) == 0
    assert not any(
        r["route"].startswith("/v1.0/me/mailFolders") for r in emulator.stats.snapshot()["recent"]
    )


async def test_mail_that_arrives_before_the_first_host_is_delivered_when_one_connects(
    stack, emulator, backend
):
    boot = now().replace(microsecond=0)
    await (
        stack.email.cycle()
    )  # no target yet: the cursor starts now all the same, at the container's first boot
    cursor = parse_email_cursor(await backend.read_text(EMAIL_CURSOR_KEY) or "")
    assert boot <= cursor.ts <= now() and cursor.claim_ids == ()
    emulator.stats.reset()
    sent = [
        emulator.state.deliver_mail(
            to=emulator.seed.agent_user.id,
            from_address="ada.partner@fabrikam.com",
            subject=f"before any host {i}",
            body="hello",
            received=boot + timedelta(seconds=1 + i),
        ).id
        for i in range(3)
    ]
    stack.email.clock = lambda: boot + timedelta(minutes=1)
    await stack.email.cycle()  # still no target: no mailbox call, nothing claimed
    assert mailbox_reads(emulator) == 0

    target = await connect(stack)
    stack.email.clock = lambda: (
        boot + timedelta(minutes=10)
    )  # the host connected ten minutes after the boot
    await stack.email.cycle()

    assert target.ids == sent


@pytest.mark.parametrize("emulator", [130], indirect=True)
async def test_130_chats_are_discovered_across_three_pages(stack, emulator):
    emulator.stats.reset()
    await stack.discovery.cycle()
    assert stack.watched.chats == set(chat_ids(emulator))
    pages = [r for r in emulator.stats.snapshot()["recent"] if r["route"] == "/v1.0/me/chats"]
    assert len(pages) == 3
    assert (await stack.watched.load()).value == "present"


class SponsorWait(RecordingTarget):
    def accepts(self, message: InboundMessage) -> bool:
        return message.source.value == "chat" and message.sender_is_sponsor


async def test_a_sponsor_wait_takes_the_reply_behind_someone_elses_message_which_stays_for_a_push_host(
    stack, emulator
):
    await stack.discovery.cycle()  # sponsors and chat members for the gate
    wait = SponsorWait(target_id="wait", kind=TargetKind.SPONSOR_WAIT)
    stack.hub.register(wait)
    group = chat_ids(emulator)[1]
    ada, other = emulator.seed.sponsors[0].id, human(emulator, 1)
    await stack.chats.cycle()  # first sight
    chatter = emulator.state.post_message(group, sender_id=other, content="lunch?")
    reply = emulator.state.post_message(group, sender_id=ada, content="yes, ship it")
    await stack.chats.cycle()
    assert wait.ids == [reply.id]
    stack.hub.unregister("wait")
    push = RecordingTarget()
    stack.hub.register(push)
    await stack.chats.cycle()
    await stack.chats.cycle()
    assert push.ids == [
        chatter.id
    ]  # delivered once a host that takes it is here; the reply not again


async def test_only_chats_whose_newest_message_moved_are_polled(stack, emulator):
    target = await connect(stack)
    quiet, busy, _ = chat_ids(emulator)
    await stack.chats.cycle()  # first sight everywhere
    await stack.chats.cycle()  # every cursor resolved, steady
    emulator.stats.reset()
    await stack.chats.cycle()
    assert (
        polled_chats(emulator) == []
    )  # nothing new anywhere: one /me/chats scan, no message reads
    posted = emulator.state.post_message(busy, sender_id=human(emulator), content="news")
    await stack.chats.cycle()
    assert set(polled_chats(emulator)) == {busy} and quiet not in polled_chats(emulator)
    assert target.ids[-1] == posted.id


async def test_a_held_mail_batch_is_settled_and_delivered_even_when_another_replica_has_the_poll_turn(
    emulator: RunningEmulator, backend: BlobBackend
) -> None:
    """Only the replica holding a batch can settle it: skipping its cycle for the fleet's turn would
    leave the batch undelivered until this replica won a turn again."""
    faulty = FaultyBackend(backend)
    stack = await build_stack(emulator, faulty, is_cloud=True)
    try:
        target = await connect(stack)
        held, _ = await hold_a_mail_batch(stack, faulty)
        assert stack.email.turn is not None
        stack.email.turn.interval = timedelta(minutes=1)
        await backend.write_text(
            turn_key("email_poll"), json.dumps({"at": now().isoformat(), "by": "another"})
        )
        await stack.email.cycle()
        assert target.ids == [held]
    finally:
        await stack.aclose()


async def test_a_mail_whose_headers_say_automated_is_not_pushed_while_a_persons_is(stack, emulator):
    target = await connect(stack)
    await stack.email.cycle()  # the cloud cursor starts at "now"
    start, agent = now(), emulator.seed.agent_user.id

    def mail(subject: str, seconds: int, headers: dict[str, str]) -> str:
        # Every sender looks like a person's address: only the internet headers tell them apart.
        return emulator.state.deliver_mail(
            to=agent,
            from_address="ada.partner@fabrikam.com",
            subject=subject,
            body="b",
            received=start + timedelta(seconds=seconds),
            headers=headers,
        ).id

    person = mail("can we talk", 1, {"Message-ID": "<1@fabrikam.com>", "Auto-Submitted": "no"})
    mail("out of office", 2, {"Auto-Submitted": "auto-replied"})
    mail("weekly digest", 3, {"Precedence": "bulk"})
    mail("newsletter", 4, {"List-Unsubscribe": "<mailto:leave@fabrikam.com>"})
    stack.email.clock = lambda: start + timedelta(minutes=1)
    await stack.email.cycle()
    assert target.ids == [person]
