"""A live Prometheus evaluates deploy/prometheus/alerts.yml on a real fleet (issue 26 item 3).

Three replica processes (Azurite through the fault proxy, the Graph emulator, a push host) are scraped
by Debian's ``prometheus`` running deploy/prometheus's configuration (service.devstack's fleet harness;
tests/deploy/live_prometheus.py says what the test copy changes). Overlapping, within about three
minutes: a Graph 429 storm, the scanner's holder SIGKILLed and, once its lease moved, the storage cut
off at the proxy. Each answer comes from Prometheus' HTTP API.

The rules file is used as it is, and its ``for`` durations are 10 and 15 minutes for the Graph and
storage alerts. A three-minute test cannot wait them out, so it asserts what only real series can
show: the fault turns the alert's expression true on the series the replicas export (the alert goes
*pending*, with the labels the rule names), and once the fault is gone its expression turns false again
(the alert leaves the list: resolved). That the alert fires only after its ``for``, and not on a
blip, is pinned by promtool's unit tests (tests/deploy/prometheus_rules), which run the same rules on
synthetic series of the same shape.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml
from eventually import SLOW_POLL_S, SLOW_WAIT_S, eventually

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import start_emulator
from service.devstack.azurite import Azurite
from service.devstack.channel_host import ChannelHost
from service.devstack.fault_proxy import FaultProxy, ProxyFault, ProxyRule
from service.devstack.fleet import DEV_TOKEN, LocalFleet
from service.devstack.traffic import HumanTraffic
from service.ledger.fleet.leases import lease_key, parse_lease
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics
from service.workers import chat_scan
from tests.deploy.deploy_facts import DASHBOARD, PROMETHEUS_ALERTS
from tests.deploy.live_prometheus import Alert, LivePrometheus

pytestmark = [
    pytest.mark.slow,
    pytest.mark.fleet,
    pytest.mark.azurite,
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="Debian's prometheus is not installed: run deploy/docker/ci-setup.sh",
    ),
]

STORAGE_ALERT = "EntrabotBlobErrors"
THROTTLE_ALERT = "EntrabotGraphThrottled"
# A rule's expression turning false again after its fault: the 10-minute rate windows hold the fault's
# errors, so the alert resolves once the replicas' normal traffic since outweighs them (seconds to a
# minute or two at the fleet's rates here).
RESOLVE_WAIT_S = 150.0
# Grafana's $__rate_interval, for the panels' queries: the run's whole length, so a panel's query covers
# everything the run did.
RATE_INTERVAL = "5m"
# What a panel says when it has no series on a fleet like this one (and why).
EMPTY_ON_AN_IDLE_FLEET = "Empty on an idle fleet"


@dataclass
class AlertCourse:
    """What Prometheus said of one alert around its fault."""

    pending_labels: dict[str, str] | None = None  # the alert as first listed once the fault was on
    resolved: bool = False  # absent from the list again after the fault was removed
    states: list[str] = field(default_factory=list)
    pending_after_s: float | None = None  # from the fault on
    resolved_after_s: float | None = None  # from the fault off


@dataclass
class Takeover:
    killed: str
    successor: str | None = None
    lease_alert_states: dict[str, set[str]] = field(
        default_factory=dict
    )  # alert -> states it was seen in


@dataclass
class LiveRun:
    rules_loaded: set[str]
    storage: AlertCourse
    throttling: AlertCourse
    takeover: Takeover
    panels: dict[str, dict[str, int]]  # panel title -> each query's number of series
    descriptions: dict[str, str]
    workdir: Path


def lease_alerts() -> set[str]:
    """The alerts that read the lease-held gauge (the vacant-role alert)."""
    groups = yaml.safe_load(PROMETHEUS_ALERTS.read_text())["groups"]
    return {r["alert"] for g in groups for r in g["rules"] if "entrabot_lease_held" in r["expr"]}


def panel_queries() -> dict[str, list[str]]:
    """Each panel's PromQL with the dashboard's variables as Grafana fills them for "All"."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries: dict[str, list[str]] = {}
    for panel in dashboard["panels"]:
        exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        if exprs:
            queries[panel["title"]] = [
                e.replace("$__rate_interval", RATE_INTERVAL)
                .replace('"$job"', '".*"')
                .replace('"$pod"', '".*"')
                for e in exprs
            ]
    return queries


def panel_descriptions() -> dict[str, str]:
    return {
        p["title"]: p.get("description", "") for p in json.loads(DASHBOARD.read_text())["panels"]
    }


@pytest.fixture(scope="module")
def live_run(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
    began = time.monotonic()
    run = asyncio.run(_live_run(azurite, tmp_path_factory.mktemp("live_prometheus")))
    summary = {
        "storage": asdict(run.storage),
        "throttling": asdict(run.throttling),
        "takeover": {"killed": run.takeover.killed, "successor": run.takeover.successor},
        "run_s": round(time.monotonic() - began, 1),
    }
    print(f"\nlive Prometheus run (logs in {run.workdir}):\n{json.dumps(summary, indent=2)}")
    return run


async def _live_run(azurite: Azurite, workdir: Path) -> LiveRun:
    seed = build_seed(chats=3, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500))
    with start_emulator(seed) as emulator, FaultProxy(azurite.blob_endpoint) as proxy:
        fleet = LocalFleet(
            seed,
            workdir / "fleet",
            replicas=3,
            azurite=azurite,
            emulator=emulator,
            extra_env={"ENTRABOT_BLOB_ENDPOINT": proxy.blob_endpoint},
        )
        await asyncio.to_thread(fleet.start)
        prometheus = LivePrometheus(
            workdir / "prometheus", {m.name: f"127.0.0.1:{m.port}" for m in fleet.members}
        )
        try:
            await asyncio.to_thread(prometheus.start)
            async with _fleet_clients(fleet) as (http, store):
                return await _scenarios(fleet, prometheus, proxy, http, store, workdir)
        finally:
            prometheus.stop()
            await asyncio.to_thread(fleet.stop)


@asynccontextmanager
async def _fleet_clients(fleet: LocalFleet) -> AsyncIterator[tuple[httpx.AsyncClient, BlobBackend]]:
    assert fleet.azurite is not None
    # Straight to Azurite, not through the proxy: the test reads the lease records while storage is cut.
    store = BlobBackend.from_connection_string(
        fleet.azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            yield http, store
    finally:
        await store.aclose()


async def _scenarios(
    fleet: LocalFleet,
    prometheus: LivePrometheus,
    proxy: FaultProxy,
    http: httpx.AsyncClient,
    store: BlobBackend,
    workdir: Path,
) -> LiveRun:
    assert fleet.emulator is not None

    async def all_scraped() -> bool:
        return len(await prometheus.query(http, "up == 1")) == len(fleet.members)

    await eventually(
        all_scraped, "Prometheus scrapes every replica", timeout_s=SLOW_WAIT_S, poll_s=SLOW_POLL_S
    )
    rules = await prometheus.rules_loaded(http)
    stop_host = asyncio.Event()
    host = ChannelHost("host", [m.mcp_url for m in fleet.members], token=DEV_TOKEN)
    hosting = asyncio.create_task(host.run(stop_host))
    try:
        throttling, (takeover, storage), _ = await asyncio.gather(
            _graph_storm(prometheus, http, fleet.emulator.admin_url),
            _kill_the_scanner_then_cut_storage(fleet, prometheus, proxy, http, store),
            _one_delivery(fleet, host, http),
        )
        panels = {
            title: {q: len(await prometheus.query(http, q)) for q in queries}
            for title, queries in panel_queries().items()
        }
    finally:
        stop_host.set()
        await asyncio.wait_for(hosting, 15)
    return LiveRun(rules, storage, throttling, takeover, panels, panel_descriptions(), workdir)


async def _alert_course(
    prometheus: LivePrometheus,
    http: httpx.AsyncClient,
    name: str,
    fault_on: Callable[[], Awaitable[None]],
    fault_off: Callable[[], Awaitable[None]],
) -> AlertCourse:
    """Turn the fault on until the alert is listed, then off until it is not."""
    course = AlertCourse()

    async def listed() -> Alert | None:
        found = next((a for a in await prometheus.alerts(http) if a.name == name), None)
        if found is not None and (not course.states or course.states[-1] != found.state):
            course.states.append(found.state)
        return found

    async def pending() -> bool:
        alert = await listed()
        if alert is not None:
            course.pending_labels = alert.labels
        return alert is not None

    async def gone() -> bool:
        return await listed() is None

    began = time.monotonic()
    await fault_on()
    try:
        await eventually(
            pending, f"{name} pending on the fault", timeout_s=SLOW_WAIT_S, poll_s=SLOW_POLL_S
        )
        course.pending_after_s = round(time.monotonic() - began, 1)
    finally:
        await fault_off()
    ended = time.monotonic()
    await eventually(
        gone, f"{name} resolved after the fault", timeout_s=RESOLVE_WAIT_S, poll_s=SLOW_POLL_S
    )
    course.resolved, course.resolved_after_s = True, round(time.monotonic() - ended, 1)
    return course


async def _graph_storm(
    prometheus: LivePrometheus, http: httpx.AsyncClient, admin_url: str
) -> AlertCourse:
    # Half of Graph's answers are 429 (Retry-After 1 s) until the alert is pending; token requests pass.
    storm = {"status": 429, "error_rate": 0.5, "retry_after": 1, "route_pattern": "^/v1\\.0/"}

    async def on() -> None:
        (await http.post(f"{admin_url}/faults", json=storm)).raise_for_status()

    async def off() -> None:
        (await http.delete(f"{admin_url}/faults")).raise_for_status()

    return await _alert_course(prometheus, http, THROTTLE_ALERT, on, off)


async def _kill_the_scanner_then_cut_storage(
    fleet: LocalFleet,
    prometheus: LivePrometheus,
    proxy: FaultProxy,
    http: httpx.AsyncClient,
    store: BlobBackend,
) -> tuple[Takeover, AlertCourse]:
    takeover = await _kill_the_scanner(fleet, prometheus, http, store)

    async def on() -> None:
        proxy.set_rules(
            [ProxyRule(ProxyFault.FAIL_BEFORE)]
        )  # every request answered 503, nothing forwarded

    async def off() -> None:
        proxy.clear()

    return takeover, await _alert_course(prometheus, http, STORAGE_ALERT, on, off)


async def _kill_the_scanner(
    fleet: LocalFleet, prometheus: LivePrometheus, http: httpx.AsyncClient, store: BlobBackend
) -> Takeover:
    watched = lease_alerts()

    async def scanner_known() -> bool:
        return await store.read_text(lease_key(chat_scan.ROLE)) is not None

    await eventually(
        scanner_known,
        "a replica holds the scanner lease",
        timeout_s=SLOW_WAIT_S,
        poll_s=SLOW_POLL_S,
    )
    text = await store.read_text(lease_key(chat_scan.ROLE))
    assert text is not None
    holder = parse_lease(text).holder
    [victim] = [m for m in fleet.members if m.name == holder]
    await asyncio.to_thread(victim.kill)
    takeover = Takeover(killed=holder)

    async def held_elsewhere() -> bool:
        for alert in await prometheus.alerts(http):
            if alert.name in watched:
                takeover.lease_alert_states.setdefault(alert.name, set()).add(alert.state)
        series = await prometheus.query(
            http, f'entrabot_lease_held{{role="{chat_scan.ROLE}"}} == 1'
        )
        holders = {s["metric"]["pod"] for s in series} - {holder}
        takeover.successor = next(iter(holders), None)
        return takeover.successor is not None

    await eventually(
        held_elsewhere,
        "another replica reports holding the scanner lease",
        timeout_s=SLOW_WAIT_S,
        poll_s=SLOW_POLL_S,
    )
    return takeover


async def _one_delivery(fleet: LocalFleet, host: ChannelHost, http: httpx.AsyncClient) -> None:
    """A person's message pushed to the host: the delivery panels' series."""
    assert fleet.emulator is not None

    async def connected() -> bool:
        return host.connected_to is not None

    await eventually(connected, "the host is connected", timeout_s=SLOW_WAIT_S, poll_s=SLOW_POLL_S)
    [chat, *_] = fleet.emulator.state.chats_of(fleet.seed.agent_user.id)
    posted = await HumanTraffic(fleet.seed, fleet.emulator.base_url, http).post_chat(
        fleet.seed.humans[0], chat.id, "a message for the dashboards"
    )

    async def delivered() -> bool:
        return any(p.message_id == posted.message_id for p in host.pushes)

    await eventually(delivered, "the message is pushed", timeout_s=SLOW_WAIT_S, poll_s=SLOW_POLL_S)


# --- what Prometheus said ---


def test_prometheus_loads_every_alert_of_the_rules_file(live_run: LiveRun) -> None:
    groups = yaml.safe_load(PROMETHEUS_ALERTS.read_text())["groups"]
    assert live_run.rules_loaded == {r["alert"] for g in groups for r in g["rules"]}


def test_the_storage_alert_is_pending_while_storage_is_cut_and_resolves_once_it_is_back(
    live_run: LiveRun,
) -> None:
    course = live_run.storage
    assert course.pending_labels is not None and course.pending_labels["severity"] == "warning", (
        course
    )
    assert course.states[0] == "pending" and course.resolved, course


def test_the_throttling_alert_is_pending_during_a_429_storm_and_resolves_after_it(
    live_run: LiveRun,
) -> None:
    course = live_run.throttling
    assert course.pending_labels is not None and course.pending_labels["severity"] == "warning", (
        course
    )
    assert course.states[0] == "pending" and course.resolved, course


def test_a_killed_scanner_holders_lease_is_taken_over_and_no_vacant_role_alert_fires(
    live_run: LiveRun,
) -> None:
    takeover = live_run.takeover
    assert takeover.successor is not None and takeover.successor != takeover.killed, takeover
    assert all("firing" not in states for states in takeover.lease_alert_states.values()), takeover


def test_every_dashboard_panel_shows_series_or_says_why_it_is_empty_on_an_idle_fleet(
    live_run: LiveRun,
) -> None:
    empty = sorted(title for title, counts in live_run.panels.items() if not any(counts.values()))
    unexplained = [
        title for title in empty if EMPTY_ON_AN_IDLE_FLEET not in live_run.descriptions[title]
    ]
    assert unexplained == [], (
        f"no series and no {EMPTY_ON_AN_IDLE_FLEET!r} in the description: {unexplained}; "
        f"queries: {json.dumps({t: live_run.panels[t] for t in unexplained}, indent=1)}"
    )
