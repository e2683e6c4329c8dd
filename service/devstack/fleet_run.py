"""One scripted fleet run: replicas behind the fault proxy, push hosts, seeded human traffic, disruptions.

Used by the fleet tests (exactly-once under faults) and the benchmarks (delivery latency by replica
count). It wires what already exists — ``LocalFleet`` (Azurite, the Graph emulator, replica
processes), ``FaultProxy`` between the replicas and Azurite, ``ChannelHost`` for each host and
``HumanTraffic`` for the people — runs a ``FleetPlan`` (``fleet_plan``), and returns a ``FleetResult``
(``fleet_result``) whose ``account`` says what was delivered, duplicated or lost and why. Every wait
is bounded. A plan may also turn Graph's change notifications on (with faults on their delivery), make
the tenant refuse the ordered chat scan, and stop the holder of a fleet role's lease (the takeover is
timed from the lease records, ``fleet_disruptions``); the result counts the replicas' Graph requests
by route and the 429s among them.

::

    result = await FleetRun(FleetPlan(fleet=FleetShape(replicas=3, hosts=2)), workdir).run()
    assert not result.account.duplicates
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from emulator.seed import Seed, ThrottleBudget, build_seed
from service.telemetry.metrics import StorageMetrics
from service.domain.message import EMAIL_CHAT_ID
from service.clock import parse_timestamp
from service.devstack.azurite import Azurite, start_azurite
from service.devstack.channel_host import ChannelHost
from service.devstack.delivery_account import SentMessage, account_deliveries
from service.domain.message import MessageKey
from service.devstack.fault_proxy import FaultProxy, ProxyStats
from service.devstack.fleet import DEV_TOKEN, LocalFleet
from service.devstack.fleet_disruptions import Disruptor
from service.devstack.fleet_plan import POLL_STEP_S, FleetPlan
from service.devstack.fleet_result import FaultRecord, FleetResult, GraphRecord
from service.devstack.graph_load import graph_load
from service.devstack.graph_outage import OutageWindow, fleet_reads, limit_throttles, run_outage
from service.devstack.ledger_reader import MAIL_CURSOR_MARGIN_S, LedgerReader
from service.devstack.traffic import HumanTraffic
from service.storage.blob import BlobBackend

# Graph's real limits (per app: the fleet shares them): exactly-once must hold while Graph throttles,
# and the run's figures must not be kinder than Graph would be.
FLEET_THROTTLE = ThrottleBudget()


class FleetRun:
    """Runs one ``FleetPlan`` in ``workdir`` (replica logs land there). Pass a running ``azurite`` to
    share one; otherwise the run starts and stops its own."""

    def __init__(self, plan: FleetPlan, workdir: Path, *, azurite: Azurite | None = None) -> None:
        self.plan = plan
        self.workdir = workdir
        self._azurite = azurite
        seed = build_seed(
            chats=plan.traffic.chats,
            humans=plan.traffic.humans,
            throttle=FLEET_THROTTLE,
            random_seed=plan.random_seed,
        )
        self.seed: Seed = seed.model_copy(update={"chats_orderby": plan.traffic.chats_orderby})
        self.fleet: LocalFleet | None = None
        self.proxy: FaultProxy | None = None
        self.hosts: list[ChannelHost] = []

    async def run(self) -> FleetResult:
        plan = self.plan
        began = time.monotonic()
        durations: dict[str, float] = {}
        owns_azurite = self._azurite is None
        azurite = (
            self._azurite
            if self._azurite is not None
            else await asyncio.to_thread(start_azurite, location=None)
        )
        env = {
            "ENTRABOT_CHAT_POLL_INTERVAL_S": str(plan.fleet.chat_poll_s),
            "ENTRABOT_CHAT_POLL_JITTER_S": str(plan.fleet.chat_poll_jitter_s),
            "ENTRABOT_EMAIL_POLL_INTERVAL_S": str(plan.fleet.email_poll_s),
        }
        if plan.fleet.notifications:
            env["ENTRABOT_NOTIFICATION_URL"] = "http://127.0.0.1:{port}/graph/notifications"
            env["ENTRABOT_NOTIFICATION_CLIENT_STATE"] = "fleet-" + uuid.uuid4().hex
        proxy: FaultProxy | None = None
        fleet: LocalFleet | None = None
        ledger: LedgerReader | None = None
        stop = asyncio.Event()
        host_tasks: list[asyncio.Task[None]] = []
        final_stop: dict[str, float] = {}
        try:
            if plan.fleet.fault_proxy:
                proxy = self.proxy = FaultProxy(
                    azurite.blob_endpoint, random_seed=plan.random_seed
                ).start()
                env["ENTRABOT_BLOB_ENDPOINT"] = proxy.blob_endpoint
            fleet = self.fleet = LocalFleet(
                self.seed,
                self.workdir,
                replicas=plan.fleet.replicas,
                azurite=azurite,
                extra_env=env,
            )
            ledger = LedgerReader(
                BlobBackend.from_connection_string(
                    azurite.connection_string, fleet.container, metrics=StorageMetrics()
                )
            )
            await asyncio.to_thread(fleet.start)
            assert fleet.emulator is not None
            urls = [m.mcp_url for m in fleet.members]
            self.hosts = [
                ChannelHost(f"host-{chr(97 + i)}", urls[i:] + urls[:i], token=DEV_TOKEN)
                for i in range(plan.fleet.hosts)
            ]
            host_tasks = [asyncio.create_task(h.run(stop), name=h.name) for h in self.hosts]
            await self._wait_until_ready(ledger)
            durations["start_up"] = time.monotonic() - began
            if proxy is not None:
                proxy.set_rules(plan.faults.proxy_rules)
            traffic_began = time.monotonic()
            chats: list[SentMessage] = []
            outage: asyncio.Task[OutageWindow] | None = None
            async with httpx.AsyncClient(timeout=30) as http:
                for rule in plan.faults.notification_faults:
                    (
                        await http.post(
                            f"{fleet.emulator.admin_url}/notifications/faults",
                            json=rule.model_dump(),
                        )
                    ).raise_for_status()
                traffic = HumanTraffic(self.seed, fleet.emulator.base_url, http)
                disruptor = Disruptor(
                    fleet, self.hosts, takeover_wait_s=plan.bounds.takeover_wait_s
                )
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._traffic(traffic, chats))
                    group.create_task(disruptor.run(plan.faults.disruptions, traffic_began, ledger))
                    if plan.faults.graph_outage is not None:
                        outage = group.create_task(
                            run_outage(
                                plan.faults.graph_outage,
                                fleet.emulator.admin_url,
                                http,
                                traffic_began,
                            )
                        )
            durations["traffic"] = time.monotonic() - traffic_began
            sent = chats + self._mail_sent()
            drain_began = time.monotonic()
            await self._drain({m.key for m in sent})
            drained = time.monotonic()
            durations["drain"] = drained - drain_began
            if proxy is not None:
                proxy.clear()
            notification_stats = (
                (await self._admin_json(fleet.emulator.admin_url, "notifications"))["stats"]
                if plan.fleet.notifications
                else None
            )
            interactions = await ledger.interactions()
            metrics = await scrape_ledger_metrics([m.base_url for m in fleet.members if m.alive])
            throttles = {
                m.name: await scrape_total(m.base_url, "entrabot_graph_throttles_total")
                for m in fleet.members
                if m.alive
            }
            graph_log = fleet.emulator.stats.recent()
            people = self.seed.public_client.app_id
            load = graph_load(graph_log, people_app_id=people, start=traffic_began, end=drained)
            startup_load = graph_load(
                graph_log, people_app_id=people, start=began, end=traffic_began
            )
            statuses: dict[str, dict[str, int]] = fleet.emulator.stats.snapshot(recent=0)["counts"]
            throttle = await self._admin_json(fleet.emulator.admin_url, "throttle")
        finally:
            stop.set()
            if host_tasks:
                await asyncio.wait(host_tasks, timeout=10)
            if fleet is not None:
                final_stop = await asyncio.to_thread(fleet.stop)
            if proxy is not None:
                proxy.stop()
            if ledger is not None:
                await ledger.aclose()
            if owns_azurite:
                await asyncio.to_thread(azurite.stop)
        durations["total"] = time.monotonic() - began
        pushes = [p for h in self.hosts for p in h.pushes]
        account = account_deliveries(
            sent,
            [MessageKey(p.chat_id, p.message_id) for p in pushes],
            disruptor.kills,
            in_flight_window=timedelta(seconds=plan.bounds.in_flight_window_s),
        )
        return FleetResult(
            plan=plan,
            workdir=self.workdir,
            sent=sent,
            pushes=pushes,
            account=account,
            faults=FaultRecord(
                kills=list(disruptor.kills),
                disruptions=list(disruptor.records),
                proxy=proxy.stats() if proxy is not None else ProxyStats(),
                takeovers=list(disruptor.takeovers),
            ),
            graph=GraphRecord(
                traffic_began=traffic_began,
                reads=fleet_reads(graph_log),
                log_from=graph_log[0].monotonic if graph_log else 0.0,
                limit_throttles=limit_throttles(graph_log),
                outage=outage.result() if outage is not None else None,
                notification_stats=notification_stats,
                load=load,
                startup_load=startup_load,
                statuses=statuses,
                throttle=throttle,
                throttles_by_replica=throttles,
            ),
            replica_of_url={m.mcp_url: m.name for m in fleet.members},
            durations_s=durations,
            final_stop_s=final_stop,
            host_connections={h.name: h.connections for h in self.hosts},
            interactions=interactions,
            ledger_metrics=metrics,
        )

    # --- phases ---

    async def _wait_until_ready(self, ledger: LedgerReader) -> None:
        """Hosts connected, every chat bootstrapped and the email cursor initialized: a message sent
        before then would meet first-sight rules (only a chat's newest surfaces), not steady polling."""
        deadline = time.monotonic() + self.plan.bounds.ready_timeout_s
        while time.monotonic() < deadline:
            if all(h.connected_to for h in self.hosts) and await self._subscribed():
                cursors = await ledger.chat_cursor_count()
                if cursors >= self.plan.traffic.chats and await ledger.has_email_cursor():
                    await asyncio.sleep(MAIL_CURSOR_MARGIN_S)
                    return
            await asyncio.sleep(POLL_STEP_S)
        raise TimeoutError(
            f"the fleet was not ready within {self.plan.bounds.ready_timeout_s:.0f} s (hosts connected: "
            f"{[h.connected_to for h in self.hosts]}; chat cursors: {await ledger.chat_cursor_count()} of "
            f"{self.plan.traffic.chats}; subscribed: {await self._subscribed()}); replica logs are in {self.workdir}"
        )

    async def _subscribed(self) -> bool:
        """With notifications on: both subscriptions (the chats' messages, the Inbox) exist in Graph."""
        if not self.plan.fleet.notifications:
            return True
        assert self.fleet is not None and self.fleet.emulator is not None
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.get(f"{self.fleet.emulator.admin_url}/subscriptions")
        response.raise_for_status()
        kinds = {s["kind"] for s in response.json()["subscriptions"]}
        return "inbox" in kinds and len(kinds) >= 2

    @staticmethod
    async def _admin_json(admin_url: str, path: str) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.get(f"{admin_url}/{path}")
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    def _chats(self) -> list[tuple[str, list[str]]]:
        assert self.fleet is not None and self.fleet.emulator is not None
        agent_id = self.seed.agent_user.id
        return [
            (chat.id, [m.user_id for m in chat.members if m.user_id != agent_id])
            for chat in self.fleet.emulator.state.chats_of(agent_id)
        ]

    async def _traffic(self, traffic: HumanTraffic, sent: list[SentMessage]) -> None:
        """Every message of the plan, spread evenly over ``traffic_s``, mail interleaved evenly."""
        plan = self.plan
        rng = random.Random(plan.random_seed)
        chats = self._chats()
        humans = list(self.seed.humans)
        total = plan.traffic.chat_messages + plan.traffic.mails
        step = plan.traffic.traffic_s / max(1, total)
        agent_address = self.seed.agent_user.user_principal_name
        start = time.monotonic()
        for i in range(total):
            wait = start + i * step - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if (i + 1) * plan.traffic.mails // total > i * plan.traffic.mails // total:
                await traffic.send_mail(
                    rng.choice(humans),
                    agent_address,
                    f"Fleet mail {i}",
                    f"Mail number {i} of the fleet run.",
                )
                continue
            chat_id, members = rng.choice(chats)
            sender = self.seed.find_user(rng.choice(members))
            assert sender is not None
            posted = await traffic.post_chat(sender, chat_id, f"Fleet message {i}")
            sent.append(
                SentMessage(posted.chat_id, posted.message_id, parse_timestamp(posted.created))
            )

    def _mail_sent(self) -> list[SentMessage]:
        assert self.fleet is not None and self.fleet.emulator is not None
        inbox = self.fleet.emulator.state.mailbox(self.seed.agent_user.id, "inbox")
        return [SentMessage(EMAIL_CHAT_ID, mail.id, mail.received) for mail in inbox]

    async def _drain(self, expected: set[MessageKey]) -> None:
        """Wait (bounded) until pushes stop arriving: everything arrived and nothing more came for
        ``drain_settled_s`` (a late duplicate would still show), or nothing came for ``drain_quiet_s``."""
        plan = self.plan
        deadline = time.monotonic() + plan.bounds.drain_max_s
        count = -1
        changed = time.monotonic()
        while time.monotonic() < deadline:
            pushes = [(p.chat_id, p.message_id) for h in self.hosts for p in h.pushes]
            now = time.monotonic()
            if len(pushes) != count:
                count, changed = len(pushes), now
            quiet = now - changed
            if quiet >= plan.bounds.drain_quiet_s or (
                quiet >= plan.bounds.drain_settled_s and expected <= set(pushes)
            ):
                return
            await asyncio.sleep(POLL_STEP_S)


# Which series of a replica's /metrics show the ledger at work, and the labels that tell them apart.
_LEDGER_SERIES = {
    "entrabot_claims_total": ("ledger", "outcome"),
    "entrabot_cas_conflicts_total": ("ledger",),
    "entrabot_email_settle_total": ("outcome",),
    "entrabot_blob_operations_total": ("op", "outcome"),
    "entrabot_graph_holds_total": ("cause",),
    "entrabot_graph_fleet_backoff_events_total": ("event",),
}


async def scrape_ledger_metrics(base_urls: Sequence[str]) -> dict[str, dict[str, float]]:
    """The ledger counters of ``base_urls``' /metrics, summed over replicas (unreachable ones skipped)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    async with httpx.AsyncClient(timeout=5) as http:
        for url in base_urls:
            try:
                text = (await http.get(f"{url}/metrics")).text
            except httpx.HTTPError:
                continue
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    labels = _LEDGER_SERIES.get(sample.name)
                    if labels is None or (
                        sample.name == "entrabot_blob_operations_total"
                        and sample.labels.get("outcome") == "ok"
                    ):
                        continue
                    key = "/".join(sample.labels.get(label, "") for label in labels)
                    totals[sample.name.removeprefix("entrabot_").removesuffix("_total")][key] += (
                        sample.value
                    )
    return {name: dict(sorted(values.items())) for name, values in sorted(totals.items())}


async def scrape_total(base_url: str, sample: str) -> float:
    """The sum of one counter's samples in a replica's /metrics (0 when it is absent or unreachable)."""
    async with httpx.AsyncClient(timeout=5) as http:
        try:
            text = (await http.get(f"{base_url}/metrics")).text
        except httpx.HTTPError:
            return 0.0
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == sample
    )
