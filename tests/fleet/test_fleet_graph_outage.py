"""Issue 14, item 7: when Graph fails, the fleet backs off as a whole, and loses nothing.

Two replica processes share one Azurite container and the strict emulator (Graph's real limits); two
push hosts; seeded people post 240 chat messages and 20 mails over 80 s. From 25 s in, for 30 s, every
Graph read the replicas make is answered 503 with Retry-After 5 (the people's posts still get
through). The fleet's Graph request rate during the outage must stay below its rate before it (both
counted from the emulator's request log in this same run), and afterwards every message must have
reached one host exactly once.

While Graph fails, each replica holds every request for the Retry-After, sends one probe after each
hold, and shares the hold through ``graph/backoff.json`` so a replica that has not been told yet holds
too. (The chat poll that falls back to reading every chat when its ``/me/chats`` scan fails is being
replaced by the elected scanner; the holds and the probe keep that fallback's reads queued behind them,
so the comparison holds either way.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.devstack.azurite import Azurite
from service.devstack.fleet_plan import Faults, FleetPlan, FleetShape, TenantTraffic
from service.devstack.fleet_run import FleetRun
from service.devstack.graph_outage import GraphOutage

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

TRAFFIC_S = 80.0

PLAN = FleetPlan(
    fleet=FleetShape(replicas=2, hosts=2, chat_poll_s=1.0, email_poll_s=3.0, fault_proxy=False),
    traffic=TenantTraffic(chats=20, chat_messages=240, mails=20, traffic_s=TRAFFIC_S),
    faults=Faults(
        graph_outage=GraphOutage(at_s=25.0, duration_s=30.0, status=503, retry_after_s=5)
    ),
)


@pytest.mark.timeout(480)
async def test_a_graph_outage_slows_the_whole_fleet_and_everything_posted_arrives_once_afterwards(
    azurite: Azurite, tmp_path: Path
) -> None:
    result = await FleetRun(PLAN, tmp_path / "fleet", azurite=azurite).run()
    summary = result.summary()
    print(f"\nfleet outage run summary:\n{json.dumps(summary, indent=2)}")
    account = result.account

    assert result.graph.outage is not None
    assert result.graph.log_from <= result.graph.traffic_began, (
        "the emulator's request log lost the start of the run"
    )
    rates = result.graph.read_rates()
    assert rates is not None
    assert rates["during"] < rates["before"], (
        f"the fleet read Graph faster during the outage than before: {rates}"
    )
    # One replica's Retry-After held the other: a hold learnt from graph/backoff.json.
    holds = result.ledger_metrics.get("graph_holds", {})
    assert holds.get("unavailable", 0) > 0 and holds.get("fleet", 0) > 0, holds

    assert not account.duplicates, f"delivered more than once: {dict(account.duplicates)}"
    assert not account.unexpected, f"pushed but never sent by the run: {account.unexpected}"
    assert not account.unexplained, (
        f"{len(account.unexplained)} message(s) never delivered: {summary['unexplained_losses']}; "
        f"replica logs in {result.workdir}"
    )
    assert account.delivered == account.sent
