"""Issue 7: every inbound message is delivered exactly once across the fleet, with faults on.

Three replica processes share one Azurite container through the fault proxy (writes that commit and
lose their response, writes refused with 503, delays); two push hosts; 50 chats; 1,000 chat messages
and 200 mails from seeded humans over two minutes. Mid-run the replica holding host A is SIGKILLed
(its host fails over) and later restarted; then the replica holding host B gets SIGTERM and is
restarted too. Afterwards no message may have reached a host twice, and every message must have
reached one, except claims in flight at the SIGKILL: undelivered, recorded as claimed in the ledger
read right after the kill, and sent within the in-flight window before it. Those are counted and
printed; anything else undelivered fails the test.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from service.devstack.azurite import Azurite
from service.devstack.fault_proxy import WRITE_METHODS, ProxyFault, ProxyRule
from service.devstack.fleet_disruptions import SIGTERM_GRACE_S
from service.devstack.fleet_plan import (
    Disruption,
    DisruptionKind,
    Faults,
    FleetPlan,
    FleetShape,
    TenantTraffic,
)
from service.devstack.fleet_result import FleetResult
from service.devstack.fleet_run import FleetRun

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

TRAFFIC_S = 120.0

PLAN = FleetPlan(
    fleet=FleetShape(replicas=3, hosts=2, chat_poll_s=1.0, email_poll_s=3.0),
    traffic=TenantTraffic(chats=50, chat_messages=1000, mails=200, traffic_s=TRAFFIC_S),
    faults=Faults(
        proxy_rules=(
            ProxyRule(ProxyFault.COMMIT_THEN_DROP, probability=0.05, methods=WRITE_METHODS),
            ProxyRule(ProxyFault.FAIL_BEFORE, probability=0.03, methods=WRITE_METHODS),
            ProxyRule(ProxyFault.DELAY, probability=0.2, delay_ms=30),
        ),
        disruptions=(
            Disruption(0.30 * TRAFFIC_S, DisruptionKind.SIGKILL, host="host-a"),
            Disruption(0.45 * TRAFFIC_S, DisruptionKind.RESTART),
            Disruption(0.60 * TRAFFIC_S, DisruptionKind.SIGTERM, host="host-b"),
            Disruption(0.75 * TRAFFIC_S, DisruptionKind.RESTART),
        ),
    ),
)


def _report(result: FleetResult, tmp_path: Path) -> dict[str, object]:
    summary = result.summary()
    path = tmp_path / "fleet_summary.json"
    path.write_text(json.dumps(summary, indent=2))
    print(f"\nfleet run summary ({path}):\n{json.dumps(summary, indent=2)}")
    return summary


def _sent_in_window_before(result: FleetResult, kill_index: int) -> int:
    kill = result.faults.kills[kill_index]
    window = timedelta(seconds=result.plan.bounds.in_flight_window_s)
    return sum(1 for m in result.sent if timedelta(0) <= kill.at - m.created <= window)


@pytest.mark.timeout(420)
async def test_every_message_reaches_one_host_exactly_once_through_faults_kills_and_restarts(
    azurite: Azurite, tmp_path: Path
) -> None:
    result = await FleetRun(PLAN, tmp_path / "fleet", azurite=azurite).run()
    summary = _report(result, tmp_path)
    account = result.account

    sent = summary["sent"]
    assert isinstance(sent, dict) and sent["chat"] >= 1000 and sent["mail"] >= 200

    # The scenario happened as planned: faults were injected, and the killed replica held a host.
    assert (
        result.faults.proxy.commit_then_drop > 0
        and result.faults.proxy.fail_before > 0
        and result.faults.proxy.delayed > 0
    )
    kinds = [d.kind for d in result.faults.disruptions]
    assert kinds == [
        DisruptionKind.SIGKILL,
        DisruptionKind.RESTART,
        DisruptionKind.SIGTERM,
        DisruptionKind.RESTART,
    ]
    assert result.faults.disruptions[0].hosts_on_it and result.faults.disruptions[2].hosts_on_it
    kill_at = result.faults.kills[0].at.timestamp()
    for host in result.faults.disruptions[0].hosts_on_it:  # it failed over and kept receiving
        assert result.host_connections[host] >= 2
        assert any(p.host == host and p.received_at > kill_at for p in result.pushes)
    sigterm = result.faults.disruptions[2]
    assert sigterm.exited_by_itself, (
        f"{sigterm.replica} had to be SIGKILLed after the {SIGTERM_GRACE_S:.0f} s grace"
    )

    # Exactly once: nothing twice, nothing that was never sent.
    assert not account.duplicates, f"delivered more than once: {dict(account.duplicates)}"
    assert not account.unexpected, f"pushed but never sent by the run: {account.unexpected}"

    # Nothing lost but claims in flight at the SIGKILL, and those few.
    assert not account.unexplained, (
        f"{len(account.unexplained)} message(s) lost without a SIGKILL to explain them: "
        f"{summary['unexplained_losses']}; replica logs in {result.workdir}"
    )
    lost = len(account.lost_at_sigkill)
    bound = _sent_in_window_before(result, 0)
    print(
        f"lost at the SIGKILL of {result.faults.kills[0].replica}: {lost} (sent in the in-flight window: {bound})"
    )
    assert lost <= bound
    assert account.delivered + lost == account.sent
