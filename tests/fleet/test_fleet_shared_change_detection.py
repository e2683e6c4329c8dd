"""Issue 14: shared change detection keeps every message exactly once across the fleet.

Both runs: three replica processes share one Azurite container and the strict emulator (Graph's real
limits, ``ThrottleBudget()``); two push hosts; 50 chats; seeded people post chat messages and mails
for a minute. Afterwards no message may have reached a host twice and every message must have reached
one (except, in the first run, claims the SIGKILLed replica had won and not pushed yet: the loss the
design accepts, bounded as in the issue-7 fleet test). Each run prints a JSON summary: delivery latency,
the replicas' Graph requests per second by route and the 429s among them, the scanner takeover.

1. Change notifications on (each replica's own loopback receiver; the subscription points at the
   subscription manager's replica), 10 % of the emulator's notifications dropped and 5 % duplicated,
   and 20 s in, the replica named in ``leases/chat_scanner.json`` is SIGKILLed. Another replica must
   take the scanner lease — never before the killed holder's record expired, and within one lease
   ttl plus one renewal attempt plus one chat-poll cycle (the roles take their turn in the chat poll)
   of the kill, the bound ``chat_scan``'s lease constants give. If the scanner was also the
   subscription manager, the notifications go to a dead receiver until the manager lease (30 s)
   moves and the new manager re-points the subscription: the scan and the sweep carry the gap.
2. The tenant refuses the ordered chat scan (``chats_orderby: refused``) and no notification URL is
   set: the scanner walks ``/me/chats`` unordered at its paced rate; every message arrives once, and
   the fleet must stay within Graph's limits — not one request answered 429, at start-up or during
   the traffic (expected to fail until the core paces its readers; see the xfail below).

One run per scenario (a module fixture), shared by the tests that check it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from emulator.notification_faults import NotificationFaultRule
from service.devstack.azurite import Azurite
from service.devstack.fleet_plan import (
    Bounds,
    Disruption,
    DisruptionKind,
    Faults,
    FleetPlan,
    FleetShape,
    TenantTraffic,
)
from service.devstack.fleet_result import FleetResult
from service.devstack.fleet_run import FleetRun
from service.ledger.fleet.leases import Lease
from service.storage.local import LocalBackend
from service.telemetry.metrics import RoleMetrics
from service.workers import chat_scan
from tests.fleet.fleet_checks import assert_each_message_delivered_once

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

TRAFFIC_S = 60.0
SCANNER_KILL_AT_S = 20.0

# The safety sweep reads each of the 50 chats every 20 s and the relaxed scan runs every 30 s: a
# message whose notification was dropped at the end of the traffic may take that long to arrive.
DRAIN_QUIET_S = 40.0

# Replicas talk to Azurite directly: the storage faults are the issue-7 test's; these runs are about
# change detection.
BASE_PLAN = FleetPlan(
    fleet=FleetShape(replicas=3, hosts=2, fault_proxy=False),
    traffic=TenantTraffic(chats=50, chat_messages=300, mails=30, traffic_s=TRAFFIC_S),
    bounds=Bounds(drain_quiet_s=DRAIN_QUIET_S, drain_max_s=120.0),
)

NOTIFIED_PLAN = replace(
    BASE_PLAN,
    fleet=replace(BASE_PLAN.fleet, notifications=True),
    faults=Faults(
        notification_faults=(
            NotificationFaultRule(action="drop", fraction=0.10),
            NotificationFaultRule(action="duplicate", fraction=0.05),
        ),
        disruptions=(
            Disruption(SCANNER_KILL_AT_S, DisruptionKind.SIGKILL, lease_role=chat_scan.ROLE),
        ),
    ),
)

UNORDERED_PLAN = replace(BASE_PLAN, traffic=replace(BASE_PLAN.traffic, chats_orderby="refused"))


def _run(plan: FleetPlan, azurite: Azurite, workdir: Path, name: str) -> FleetResult:
    """One fleet run shared by the module's tests on it; its JSON summary is printed and kept."""
    result = asyncio.run(FleetRun(plan, workdir / "fleet", azurite=azurite).run())
    summary = result.summary()
    path = workdir / f"{name}_summary.json"
    path.write_text(json.dumps(summary, indent=2))
    print(f"\n{name} fleet run summary ({path}):\n{json.dumps(summary, indent=2)}")
    return result


@pytest.fixture(scope="module")
def notified_run(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> FleetResult:
    return _run(
        NOTIFIED_PLAN, azurite, tmp_path_factory.mktemp("notified"), "notified_scanner_kill"
    )


@pytest.fixture(scope="module")
def unordered_run(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> FleetResult:
    return _run(UNORDERED_PLAN, azurite, tmp_path_factory.mktemp("unordered"), "unordered")


def _scanner_takeover_bound(plan: FleetPlan, tmp_path: Path) -> timedelta:
    """From the kill: the holder's last record expires within one ttl; a candidate tries again within
    one renewal interval of that; and it tries only in its chat poll's turn (one cycle)."""
    lease = Lease(
        LocalBackend(tmp_path),
        chat_scan.ROLE,
        "bound",
        ttl=chat_scan.LEASE_TTL,
        margin=chat_scan.LEASE_MARGIN,
        metrics=RoleMetrics(),
    )
    cycle = timedelta(seconds=plan.fleet.chat_poll_s + plan.fleet.chat_poll_jitter_s)
    return chat_scan.LEASE_TTL + lease.renew_every + cycle


@pytest.mark.timeout(420)
def test_the_scanner_lease_moves_to_a_live_replica_after_expiry_and_within_its_bound_when_its_holder_is_killed(
    notified_run: FleetResult, tmp_path: Path
) -> None:
    result = notified_run
    assert [d.kind for d in result.faults.disruptions] == [DisruptionKind.SIGKILL]
    [takeover] = result.faults.takeovers
    killed = result.faults.disruptions[0].replica
    assert takeover.stopped == killed and takeover.last_expires_at is not None, takeover
    assert takeover.successor is not None and takeover.successor != killed, (
        f"no replica took {chat_scan.ROLE} over within {NOTIFIED_PLAN.bounds.takeover_wait_s:.0f} s: {takeover}; "
        f"replica logs in {result.workdir}"
    )
    # Never before the killed holder's record expired: two scanners at once.
    assert takeover.past_expiry_s is not None and takeover.past_expiry_s >= 0, takeover
    bound = _scanner_takeover_bound(NOTIFIED_PLAN, tmp_path)
    assert takeover.taken_after_s is not None and takeover.taken_after_s <= bound.total_seconds(), (
        f"taken over {takeover.taken_after_s:.2f} s after the kill; the lease bounds it to "
        f"{bound.total_seconds():.2f} s"
    )
    print(
        f"scanner {killed} -> {takeover.successor}: taken over {takeover.taken_after_s:.2f} s after the "
        f"SIGKILL ({takeover.past_expiry_s:.2f} s past its expiry; bound {bound.total_seconds():.2f} s)"
    )


@pytest.mark.timeout(420)
def test_every_message_reaches_one_host_once_with_notifications_dropped_and_doubled_and_the_scanner_killed(
    notified_run: FleetResult,
) -> None:
    result = notified_run
    account = result.account
    # The scenario happened: notifications flowed, some were dropped and some duplicated.
    stats = result.graph.notification_stats or {}
    assert (
        stats.get("sent", 0) > 0 and stats.get("dropped", 0) > 0 and stats.get("duplicated", 0) > 0
    ), stats
    assert result.faults.kills, "the scanner's replica was not killed"

    assert_each_message_delivered_once(result)
    # A claim the killed replica had won and not pushed is the one loss the design accepts (issue 7);
    # the scanner's death itself loses nothing.
    lost = len(account.lost_at_sigkill)
    window = timedelta(seconds=NOTIFIED_PLAN.bounds.in_flight_window_s)
    in_window = sum(
        1 for m in result.sent if timedelta(0) <= result.faults.kills[0].at - m.created <= window
    )
    print(
        f"lost at the SIGKILL of {result.faults.kills[0].replica}: {lost} (sent in the in-flight window: {in_window}; "
        f"hosts on it: {list(result.faults.disruptions[0].hosts_on_it)})"
    )
    assert lost <= in_window
    assert account.delivered + lost == account.sent


@pytest.mark.timeout(420)
def test_an_unordered_tenant_without_notifications_gets_every_message_delivered_once(
    unordered_run: FleetResult,
) -> None:
    result = unordered_run
    # The scenario happened: Graph refused the ordered scan, and the scanner kept walking unordered.
    assert result.graph.statuses.get("GET /v1.0/me/chats", {}).get("400", 0) > 0, (
        result.graph.statuses
    )
    load = result.graph.load
    assert load is not None and load.by_route.get("GET /v1.0/me/chats", {}).get("200", 0) > 0, load
    assert result.graph.notification_stats is None

    assert_each_message_delivered_once(result)
    assert result.account.delivered == result.account.sent


# Replicas taking the same hint reach a chat a turn apart (ENTRABOT_CHAT_READ_SPREAD_S, over Graph's
# one read a second per chat), and each replica paces its reads to its share of the fleet's budget
# (service/workers/read_pacer.py), first sights of a cold start included.
@pytest.mark.timeout(420)
def test_an_unordered_tenant_fleet_stays_within_graph_limits(unordered_run: FleetResult) -> None:
    startup, traffic = unordered_run.graph.startup_load, unordered_run.graph.load
    assert startup is not None and traffic is not None
    assert startup.complete and traffic.complete, (
        "the emulator's request log lost the start of the run"
    )
    throttled = {"start-up": startup.throttled_by(5.0), "traffic": traffic.throttled_by(5.0)}
    routes = list(startup.by_route.items()) + list(traffic.by_route.items())
    reads = sum(sum(v.values()) for r, v in routes if "/chats/{id}/messages" in r)
    # The scan's own pacing must never meet the list-chats limit. Graph's one read a second per chat
    # is shared by replicas that only take turns (no lock), so a rare 429 there is retried after its
    # Retry-After; it must stay rare (1 % of the reads), not grow with the traffic.
    assert sum(v.get("429", 0) for r, v in routes if r.endswith("/me/chats")) == 0, throttled
    assert startup.throttled + traffic.throttled <= max(1, reads // 100), (
        f"Graph requests answered 429, by 5 s of the run: {throttled}; during the traffic: {traffic.by_route}; "
        f"the emulator's limits: {unordered_run.graph.throttle.get('limits')}"
    )
