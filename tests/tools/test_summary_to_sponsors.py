"""The daily summary reaches its sponsors once per fleet: several producers (each with its own store handle,
mail sender and mailer, as replicas have) race on one LocalBackend against the Graph emulator over HTTP,
with Graph losing the send's answer, refusing it with a 504, or resetting the connection after Exchange
took it; and a replica that takes over a stale claim finds the mail in Sent Items instead of sending it again.
Ada is the agent's sponsor: exactly one summary in her inbox and one in the agent's Sent Items."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from emulator.server import RunningEmulator
from emulator.state import MailMessage
from service.delivery.mail_send import SEND_ID_HEADER, MailSender
from service.devstack.fault_proxy import FaultProxy, ProxyFault, ProxyRule
from service.ledger.memory.interactions import Channel, Direction, Interaction, InteractionLog
from service.ledger.summary.claim import summary_keys
from service.ledger.summary.daily import day_window
from service.ledger.summary.production import DailySummaryProducer, SummaryOutcome
from service.storage.local import LocalBackend
from service.telemetry.metrics import LedgerMetrics
from service.tools.summary import last_ended_day
from service.workers.summary_mail import SponsorSummaryMail
from tests.tools.tool_world import ToolWorld, tool_world

RACERS = 4
SECRET = "Grace's words: wire 40k to account 991 today"
SEND_ROUTE = r"/me/sendMail$"


def producers(world: ToolWorld, n: int = RACERS) -> list[DailySummaryProducer]:
    """``n`` replicas' producers on one data directory, each with its own handles, as separate replicas have."""
    root = world.backend.root if isinstance(world.backend, LocalBackend) else None
    assert root is not None
    out = []
    for _ in range(n):
        store = LocalBackend(root)
        sender = MailSender(world.deps.graph, world.clock, pause_s=0.05)
        out.append(
            DailySummaryProducer(
                store,
                InteractionLog(store, clock=world.clock),
                promises=world.promises,
                mailer=SponsorSummaryMail(world.deps.gate, sender, reads_sponsors=True),
                clock=world.clock,
                metrics=LedgerMetrics(),
            )
        )
    return out


async def a_day(world: ToolWorld) -> datetime:
    """Pin the clock to now, put a few records (one with someone else's words) in the day that last ended."""
    now = datetime.now(timezone.utc)
    world.clock.pinned = now
    day = last_ended_day(now)
    start, _ = day_window(day)
    grace = world.user("Grace").id
    await world.interactions.record(
        Interaction(
            start + timedelta(hours=1),
            Direction.IN,
            Channel.CHAT,
            "delivered",
            world.chat(1),
            "m1",
            grace,
            body=SECRET,
        )
    )
    await world.interactions.record(
        Interaction(
            start + timedelta(hours=2),
            Direction.OUT,
            Channel.CHAT,
            "send_unconfirmed",
            world.chat(1),
            None,
            world.agent.object_id,
        )
    )
    return datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc)


def summaries(emu: RunningEmulator, user_id: str, folder: str) -> list[MailMessage]:
    return [m for m in emu.state.mailbox(user_id, folder) if m.subject.startswith("Daily summary")]  # type: ignore[arg-type]


def assert_one_summary(world: ToolWorld, emu: RunningEmulator) -> MailMessage:
    (received,) = summaries(emu, world.user("Ada").id, "inbox")
    (copy,) = summaries(emu, world.seed.agent_user.id, "sentitems")
    assert dict(received.headers)[SEND_ID_HEADER] == dict(copy.headers)[SEND_ID_HEADER]
    assert received.content_type == "html" and SECRET not in received.body
    assert "Needs you" in received.body and "may or may not be there" in received.body
    assert received.subject.endswith(": 1 need you, 1 handled, 0 heads-up")
    return received


async def stored(world: ToolWorld, day: datetime) -> dict[str, object]:
    return json.loads(await world.backend.read_text(summary_keys(day.date())[0]) or "{}")


async def race(racers: list[DailySummaryProducer], day: datetime) -> list[SummaryOutcome]:
    return list(await asyncio.gather(*(p.produce(day.date()) for p in racers)))


async def test_racing_replicas_mail_each_sponsor_once(world: ToolWorld) -> None:
    day = await a_day(world)
    outcomes = await race(producers(world), day)
    assert outcomes.count(SummaryOutcome.PRODUCED) == 1
    received = assert_one_summary(world, world.emu)
    claim = await stored(world, day)
    assert claim["state"] == "mailed" and claim["recipients"] == [
        world.user("Ada").user_principal_name
    ]
    assert (
        claim["send_id"] == dict(received.headers)[SEND_ID_HEADER]
        and claim["mail_outcome"] == "sent"
    )
    assert await race(producers(world), day) == [SummaryOutcome.ALREADY_DONE] * RACERS
    assert_one_summary(world, world.emu)


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        ({"status": 500, "after_commit": True}, "found_after_lost_answer"),
        ({"status": 504}, "sent_after_check"),
    ],
)
async def test_racing_replicas_mail_once_when_graph_loses_or_refuses_the_send(
    world: ToolWorld, fault: dict[str, object], outcome: str
) -> None:
    day = await a_day(world)
    await world.admin(
        "faults", {**fault, "method": "POST", "route_pattern": SEND_ROUTE, "count": 1}
    )
    assert (await race(producers(world), day)).count(SummaryOutcome.PRODUCED) == 1
    assert_one_summary(world, world.emu)
    assert (await stored(world, day))["mail_outcome"] == outcome


async def test_racing_replicas_mail_once_when_the_connection_is_reset_after_exchange_took_it(
    emu: RunningEmulator, tmp_path: Path
) -> None:
    with FaultProxy(emu.base_url) as proxy:
        proxy.add(
            ProxyRule(
                ProxyFault.COMMIT_THEN_DROP, methods=frozenset({"POST"}), path=SEND_ROUTE, times=1
            )
        )
        async with tool_world(emu, tmp_path, graph_url=f"{proxy.base_url}/v1.0") as world:
            day = await a_day(world)
            assert (await race(producers(world), day)).count(SummaryOutcome.PRODUCED) == 1
            assert proxy.stats().commit_then_drop == 1
            assert_one_summary(world, emu)
            assert (await stored(world, day))["mail_outcome"] == "found_after_lost_answer"


async def test_a_replica_taking_over_a_stale_mailing_finds_the_mail_in_sent_items(
    world: ToolWorld,
) -> None:
    day = await a_day(world)
    # The owner's send lands and its answer is lost, and Sent Items cannot be read: it cannot tell, so it
    # leaves the claim in mailing (as an owner that died right after sending would).
    await world.admin(
        "faults",
        {
            "status": 500,
            "after_commit": True,
            "method": "POST",
            "route_pattern": SEND_ROUTE,
            "count": 1,
        },
    )
    await world.admin(
        "faults", {"status": 503, "method": "GET", "route_pattern": r"/mailFolders/sentitems/"}
    )
    first, taker = producers(world, 2)
    assert await first.produce(day.date()) is SummaryOutcome.UNRESOLVED
    assert (await stored(world, day))["state"] == "mailing"
    assert len(summaries(world.emu, world.user("Ada").id, "inbox")) == 1  # it did go out
    assert (
        await taker.produce(day.date()) is SummaryOutcome.IN_PROGRESS
    )  # the owner's lease still runs
    response = await world.http.delete(f"{world.emu.admin_url}/faults")
    assert response.status_code in (200, 204), response.text
    world.clock.pinned = datetime.now(timezone.utc) + timedelta(minutes=11)
    assert await taker.produce(day.date()) is SummaryOutcome.RECOVERED
    claim = await stored(world, day)
    assert claim["state"] == "mailed" and claim["mail_outcome"] == "found_on_takeover"
    assert_one_summary(world, world.emu)


async def test_run_daily_summary_reports_whom_the_summary_was_mailed_to(world: ToolWorld) -> None:
    day = await a_day(world)
    out = await world.ok("run_daily_summary", {"day": day.date().isoformat()})
    assert out["outcome"] == "produced" and out["state"] == "mailed"
    assert out["mailed_to"] == [world.user("Ada").user_principal_name]
    assert [i["rule"] for i in out["counts"]["triage"]["needs_you"]] == ["send_unconfirmed"]
    again = await world.ok("run_daily_summary", {"day": day.date().isoformat()})
    assert again["outcome"] == "already_done" and again["mailed_to"] == out["mailed_to"]
    assert_one_summary(world, world.emu)
