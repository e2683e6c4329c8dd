"""One scripted fleet run: replicas behind the fault proxy, push hosts, seeded human traffic, disruptions.

Used by the fleet tests (exactly-once under faults) and the benchmarks (delivery latency by replica
count). It wires what already exists — ``LocalFleet`` (Azurite, the Graph emulator, replica
processes), ``FaultProxy`` between the replicas and Azurite, ``ChannelHost`` for each host and
``HumanTraffic`` for the people — runs a ``FleetPlan``, and returns a ``FleetResult`` whose
``account`` says what was delivered, duplicated or lost and why. Every wait is bounded. A plan may also
turn Graph's change notifications on (with faults on their delivery), make the tenant refuse the
ordered chat scan, and stop the holder of a fleet role's lease (the takeover is timed from the lease
records); the result counts the replicas' Graph requests by route and the 429s among them.

::

    result = await FleetRun(FleetPlan(replicas=3, hosts=2), workdir).run()
    assert not result.account.duplicates
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

import httpx
from prometheus_client.parser import text_string_to_metric_families

from emulator.notification_faults import NotificationFaultRule
from emulator.seed import Seed, ThrottleBudget, build_seed
from service.delivery.host_record import HostRecord, parse_host_record, record_key
from service.domain.message import EMAIL_CHAT_ID
from service.devstack.azurite import Azurite, start_azurite
from service.devstack.channel_host import ChannelHost, ReceivedPush
from service.devstack.delivery_account import (
    DeliveryAccount,
    KillRecord,
    LedgerSnapshot,
    Loss,
    MessageKey,
    SentMessage,
    account_deliveries,
)
from service.devstack.fault_proxy import FaultProxy, ProxyRule, ProxyStats
from service.devstack.fleet import DEV_TOKEN, LocalFleet, ReplicaProcess
from service.devstack.graph_load import GraphLoad, graph_load
from service.devstack.graph_outage import (
    GraphOutage,
    OutageWindow,
    fleet_reads,
    limit_throttles,
    rate,
    run_outage,
)
from service.devstack.traffic import HumanTraffic
from service.ledger.claims.chat_cursor import CURSOR_PREFIX, ChatCursor, parse_chat_cursor
from service.clock import parse_timestamp, utc_now
from service.ledger.claims.email_cursor import EMAIL_CURSOR_KEY, parse_email_cursor
from service.ledger.memory.interactions import INTERACTIONS_PREFIX
from service.ledger.fleet.leases import LeaseRecord, lease_key, parse_lease
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.storage.blob import BlobBackend

# Graph's real limits (per app: the fleet shares them): exactly-once must hold while Graph throttles,
# and the run's figures must not be kinder than Graph would be.
FLEET_THROTTLE = ThrottleBudget()
POLL_STEP_S = 0.25
LEASE_POLL_S = (
    0.1  # a takeover is timed from the records; this only bounds how late the harness sees it
)
HOST_RECONNECT_WAIT_S = 20.0
# receivedDateTime has whole-second precision: mail in the second the email cursor was initialized
# in would be older than it. Traffic starts after this much time past the initialization.
MAIL_CURSOR_MARGIN_S = 1.5

# Kubernetes gives 30 s; a replica must exit by itself well inside it, else it is SIGKILLed.
SIGTERM_GRACE_S = 10.0


class DisruptionKind(str, Enum):
    SIGKILL = "sigkill"
    SIGTERM = "sigterm"
    RESTART = "restart"


@dataclass(frozen=True)
class Disruption:
    """Something done to one replica ``at_s`` seconds after traffic starts.

    The replica is the one ``host`` is connected to at that moment, the one named ``replica``, or the
    one holding the fleet role ``lease_role`` (named in ``leases/<role>.json``); a RESTART with none of
    them restarts the replica stopped most recently. Stopping a role's holder also times the takeover.
    """

    at_s: float
    kind: DisruptionKind
    host: str | None = None
    replica: str | None = None
    lease_role: str | None = None


@dataclass(frozen=True)
class FleetPlan:
    replicas: int = 3
    hosts: int = 2  # host i tries the replicas in turn starting with replica i
    chats: int = 50
    humans: int = 6
    chat_messages: int = 1000
    mails: int = 200
    traffic_s: float = 120.0  # the messages are spread evenly over this long
    chat_poll_s: float = 1.0
    chat_poll_jitter_s: float = 0.3
    email_poll_s: float = 3.0
    fault_proxy: bool = (
        True  # False: replicas talk to Azurite directly (a benchmark of the bare path)
    )
    proxy_rules: tuple[
        ProxyRule, ...
    ] = ()  # switched on when traffic starts, off before the final read
    disruptions: tuple[Disruption, ...] = ()
    graph_outage: GraphOutage | None = (
        None  # every Graph read answered 503 + Retry-After for a while
    )
    # Graph change notifications on: each replica's notification URL is its own loopback receiver, so
    # the subscription points at the subscription manager's replica (a new manager re-points it).
    notifications: bool = False
    # Faults on the emulator's outgoing notifications (drop, duplicate...), on while traffic runs.
    notification_faults: tuple[NotificationFaultRule, ...] = ()
    # "refused": the tenant answers the ordered /me/chats scan with 400 (the scanner walks unordered).
    chats_orderby: Literal["supported", "refused"] = "supported"
    takeover_wait_s: float = (
        60.0  # after stopping a lease role's holder: how long to watch for a successor
    )
    random_seed: int = 7
    # A claim the killed replica had not pushed yet was made at most about this long after the
    # message was sent (a poll cycle, the e-mail settle margin, and slack for a busy machine).
    in_flight_window_s: float = 15.0
    ready_timeout_s: float = 90.0  # hosts connected and every chat bootstrapped
    drain_quiet_s: float = 20.0  # after traffic: stop once no push arrived for this long
    drain_settled_s: float = (
        5.0  # ... or once everything arrived and nothing more did for this long
    )
    drain_max_s: float = 90.0

    def __post_init__(self) -> None:
        if self.proxy_rules and not self.fault_proxy:
            raise ValueError(
                "proxy_rules need the fault proxy; set fault_proxy=True or drop the rules"
            )
        if self.notification_faults and not self.notifications:
            raise ValueError("notification_faults need notifications=True")
        if self.replicas < 1 or self.hosts < 1 or self.chats < 1:
            # Without a host no replica claims anything (the delivery rule): nothing would be delivered.
            raise ValueError("a fleet run needs at least one replica, one host and one chat")


@dataclass(frozen=True)
class DisruptionRecord:
    kind: DisruptionKind
    replica: str
    at: datetime
    took_s: float  # SIGTERM: until the process exited; RESTART: until /readyz answered; SIGKILL: 0
    hosts_on_it: tuple[str, ...]
    # SIGTERM: the replica exited by itself within the grace period (else it was SIGKILLed).
    exited_by_itself: bool = True


@dataclass(frozen=True)
class TakeoverRecord:
    """A fleet role whose holder was stopped, and who took it over when, by the lease records.

    ``last_expires_at`` is the stopped holder's record as read right after the stop (None: it was
    not the holder any more by then); ``taken_at`` is the successor's record's ``renewed_at`` (its
    clock when it decided to take over; the replicas share this machine's clock).
    """

    role: str
    stopped: str
    stopped_at: datetime
    last_expires_at: datetime | None
    successor: str | None = None
    taken_at: datetime | None = None
    seen_after_s: float | None = None  # when the harness first saw the successor's record

    @property
    def taken_after_s(self) -> float | None:
        """Seconds from the stop to the successor's takeover, by its record."""
        return None if self.taken_at is None else (self.taken_at - self.stopped_at).total_seconds()

    @property
    def past_expiry_s(self) -> float | None:
        """Seconds from the stopped holder's expiry to the takeover (negative: taken before expiry)."""
        if self.taken_at is None or self.last_expires_at is None:
            return None
        return (self.taken_at - self.last_expires_at).total_seconds()

    def as_json(self) -> dict[str, Any]:
        def seconds(value: float | None) -> float | None:
            return None if value is None else round(value, 2)

        return {
            "role": self.role,
            "stopped": self.stopped,
            "stopped_at": self.stopped_at.isoformat(),
            "last_expires_at": None
            if self.last_expires_at is None
            else self.last_expires_at.isoformat(),
            "successor": self.successor,
            "taken_after_s": seconds(self.taken_after_s),
            "past_expiry_s": seconds(self.past_expiry_s),
            "seen_after_s": seconds(self.seen_after_s),
        }


@dataclass
class FleetResult:
    plan: FleetPlan
    workdir: Path
    sent: list[SentMessage]
    pushes: list[ReceivedPush]
    kills: list[KillRecord]
    disruptions: list[DisruptionRecord]
    proxy: ProxyStats
    account: DeliveryAccount
    replica_of_url: dict[str, str]
    durations_s: dict[str, float]
    final_stop_s: dict[str, float]
    host_connections: dict[
        str, int
    ]  # how many MCP sessions each host opened (more than one: it failed over)
    # (chat_id, message_id) -> [(replica, action)] from the interaction log: who says it dispatched what.
    interactions: dict[MessageKey, list[tuple[str, str]]] = field(default_factory=dict)
    # Ledger counters summed over the replicas alive at the end (a restarted one counts since its restart).
    ledger_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    traffic_began: float = 0.0  # monotonic, as the emulator's request log
    # When each of the replicas' Graph reads arrived (monotonic), from the emulator's log, which keeps
    # the most recent requests only: it is complete from ``graph_log_from`` on.
    graph_reads: list[float] = field(default_factory=list)
    graph_log_from: float = 0.0
    # When Graph's limits (not an injected fault) answered a replica's read with 429, from the same log.
    limit_throttles: list[float] = field(default_factory=list)
    outage: OutageWindow | None = None
    takeovers: list[TakeoverRecord] = field(default_factory=list)
    # The emulator's notification delivery counters (sent, dropped, duplicated...), with notifications on.
    notification_stats: dict[str, int] | None = None
    # The replicas' Graph requests by route from traffic start to the end of the drain, and before
    # it (start-up: the replicas' first reads of every chat).
    graph_load: GraphLoad | None = None
    startup_graph_load: GraphLoad | None = None
    # Every request the emulator answered during the whole run (start-up too), by route and status.
    graph_statuses: dict[str, dict[str, int]] = field(default_factory=dict)
    # The emulator's throttle at the end: per Graph limit, its figure and what it admitted and throttled.
    throttle: dict[str, Any] = field(default_factory=dict)
    # The 429s each replica alive at the end says it got (entrabot_graph_throttles_total), by replica.
    throttles_by_replica: dict[str, float] = field(default_factory=dict)

    def latencies_s(self, *, mail: bool | None = None) -> list[float]:
        """Seconds from each message's creation to its first push (chat only, mail only, or both)."""
        created = {
            m.key: m.created.timestamp() for m in self.sent if mail is None or m.is_mail == mail
        }
        first: dict[MessageKey, float] = {}
        for push in self.pushes:
            key = (push.chat_id, push.message_id)
            if key in created and key not in first:
                first[key] = push.received_at - created[key]
        return sorted(first.values())

    def summary(self) -> dict[str, Any]:
        account = self.account
        by_replica = Counter(
            self.replica_of_url.get(p.replica_url, p.replica_url) for p in self.pushes
        )
        chat_latency, mail_latency = self.latencies_s(mail=False), self.latencies_s(mail=True)
        return {
            "plan": {
                "replicas": self.plan.replicas,
                "hosts": self.plan.hosts,
                "chats": self.plan.chats,
                "chat_poll_s": self.plan.chat_poll_s,
                "email_poll_s": self.plan.email_poll_s,
                "traffic_s": self.plan.traffic_s,
                "random_seed": self.plan.random_seed,
                "proxy_rules": [_rule_json(r) for r in self.plan.proxy_rules],
                "notifications": self.plan.notifications,
                "chats_orderby": self.plan.chats_orderby,
                "notification_faults": [
                    r.model_dump(exclude_defaults=True) for r in self.plan.notification_faults
                ],
            },
            "sent": {
                "chat": sum(1 for m in self.sent if not m.is_mail),
                "mail": sum(1 for m in self.sent if m.is_mail),
            },
            "pushes": account.pushes,
            "delivered": account.delivered,
            "duplicates": len(account.duplicates),
            "unexpected_pushes": len(account.unexpected),
            "lost_at_sigkill": [self._loss_json(loss) for loss in account.lost_at_sigkill],
            "unexplained_losses": [self._loss_json(loss) for loss in account.unexplained],
            "pushes_by_replica": dict(sorted(by_replica.items())),
            "hosts": {
                name: {"connections": n, "pushes": sum(1 for p in self.pushes if p.host == name)}
                for name, n in sorted(self.host_connections.items())
            },
            "disruptions": [
                {
                    "kind": d.kind.value,
                    "replica": d.replica,
                    "at": d.at.isoformat(),
                    "took_s": round(d.took_s, 2),
                    "hosts_on_it": list(d.hosts_on_it),
                }
                for d in self.disruptions
            ],
            "ledger_metrics_of_live_replicas": self.ledger_metrics,
            "fault_proxy": {
                "requests": self.proxy.requests,
                "forwarded": self.proxy.forwarded,
                "commit_then_drop": self.proxy.commit_then_drop,
                "fail_before": self.proxy.fail_before,
                "delayed": self.proxy.delayed,
                "upstream_errors": self.proxy.upstream_errors,
            },
            "latency_s": {"chat": _percentiles(chat_latency), "mail": _percentiles(mail_latency)},
            "durations_s": {k: round(v, 1) for k, v in self.durations_s.items()},
            "graph_reads_per_s": self.read_rates(),
            "graph_load": None if self.graph_load is None else self.graph_load.as_dict(),
            "startup_graph_load": None
            if self.startup_graph_load is None
            else self.startup_graph_load.as_dict(),
            "takeovers": [t.as_json() for t in self.takeovers],
            "notification_stats": self.notification_stats,
            "throttle_by_limit": self.throttle,
            "throttles_by_replica": self.throttles_by_replica,
            "final_sigterm_s": {k: round(v, 2) for k, v in self.final_stop_s.items()},
            "workdir": str(self.workdir),
        }

    def read_rates(self) -> dict[str, float] | None:
        """The fleet's Graph reads per second before, during and after the outage (None without one)."""
        window = self.outage
        if window is None:
            return None
        last_read = max(self.graph_reads, default=window.ended)
        after_ends = max(
            window.ended + 1.0, min(window.ended + window.outage.duration_s, last_read)
        )
        windows = {
            "before": (self.traffic_began, window.began),
            "during": (window.began, window.ended),
            "after": (window.ended, after_ends),
        }
        return {name: round(rate(self.graph_reads, a, b), 3) for name, (a, b) in windows.items()}

    def _loss_json(self, loss: Loss) -> dict[str, Any]:
        m = loss.message
        return {
            "chat_id": m.chat_id,
            "message_id": m.message_id[:24],
            "created": m.created.isoformat(),
            "reason": loss.reason,
            "killed_replica": loss.replica,
            "before_kill_s": None if loss.before_kill_s is None else round(loss.before_kill_s, 2),
            "interaction_log": self.interactions.get(m.key, []),
        }


class FleetRun:
    """Runs one ``FleetPlan`` in ``workdir`` (replica logs land there). Pass a running ``azurite`` to
    share one; otherwise the run starts and stops its own."""

    def __init__(self, plan: FleetPlan, workdir: Path, *, azurite: Azurite | None = None) -> None:
        self.plan = plan
        self.workdir = workdir
        self._azurite = azurite
        seed = build_seed(
            chats=plan.chats,
            humans=plan.humans,
            throttle=FLEET_THROTTLE,
            random_seed=plan.random_seed,
        )
        self.seed: Seed = seed.model_copy(update={"chats_orderby": plan.chats_orderby})
        self.fleet: LocalFleet | None = None
        self.proxy: FaultProxy | None = None
        self.hosts: list[ChannelHost] = []
        self._kills: list[KillRecord] = []
        self._disruptions: list[DisruptionRecord] = []
        self._stopped: list[ReplicaProcess] = []
        self._takeovers: list[TakeoverRecord] = []

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
            "ENTRABOT_CHAT_POLL_INTERVAL_S": str(plan.chat_poll_s),
            "ENTRABOT_CHAT_POLL_JITTER_S": str(plan.chat_poll_jitter_s),
            "ENTRABOT_EMAIL_POLL_INTERVAL_S": str(plan.email_poll_s),
        }
        if plan.notifications:
            env["ENTRABOT_NOTIFICATION_URL"] = "http://127.0.0.1:{port}/graph/notifications"
            env["ENTRABOT_NOTIFICATION_CLIENT_STATE"] = "fleet-" + uuid.uuid4().hex
        proxy: FaultProxy | None = None
        fleet: LocalFleet | None = None
        ledger: LedgerReader | None = None
        stop = asyncio.Event()
        host_tasks: list[asyncio.Task[None]] = []
        final_stop: dict[str, float] = {}
        try:
            if plan.fault_proxy:
                proxy = self.proxy = FaultProxy(
                    azurite.blob_endpoint, random_seed=plan.random_seed
                ).start()
                env["ENTRABOT_BLOB_ENDPOINT"] = proxy.blob_endpoint
            fleet = self.fleet = LocalFleet(
                self.seed, self.workdir, replicas=plan.replicas, azurite=azurite, extra_env=env
            )
            ledger = LedgerReader(
                BlobBackend.from_connection_string(azurite.connection_string, fleet.container)
            )
            await asyncio.to_thread(fleet.start)
            assert fleet.emulator is not None
            urls = [m.mcp_url for m in fleet.members]
            self.hosts = [
                ChannelHost(f"host-{chr(97 + i)}", urls[i:] + urls[:i], token=DEV_TOKEN)
                for i in range(plan.hosts)
            ]
            host_tasks = [asyncio.create_task(h.run(stop), name=h.name) for h in self.hosts]
            await self._wait_until_ready(ledger)
            durations["start_up"] = time.monotonic() - began
            if proxy is not None:
                proxy.set_rules(plan.proxy_rules)
            traffic_began = time.monotonic()
            chats: list[SentMessage] = []
            outage: asyncio.Task[OutageWindow] | None = None
            async with httpx.AsyncClient(timeout=30) as http:
                for rule in plan.notification_faults:
                    (
                        await http.post(
                            f"{fleet.emulator.admin_url}/notifications/faults",
                            json=rule.model_dump(),
                        )
                    ).raise_for_status()
                traffic = HumanTraffic(self.seed, fleet.emulator.base_url, http)
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._traffic(traffic, chats))
                    group.create_task(self._disrupt(traffic_began, ledger))
                    if plan.graph_outage is not None:
                        outage = group.create_task(
                            run_outage(
                                plan.graph_outage, fleet.emulator.admin_url, http, traffic_began
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
                if plan.notifications
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
            [(p.chat_id, p.message_id) for p in pushes],
            self._kills,
            in_flight_window=timedelta(seconds=plan.in_flight_window_s),
        )
        return FleetResult(
            plan=plan,
            workdir=self.workdir,
            sent=sent,
            pushes=pushes,
            kills=list(self._kills),
            disruptions=list(self._disruptions),
            proxy=proxy.stats() if proxy is not None else ProxyStats(),
            account=account,
            replica_of_url={m.mcp_url: m.name for m in fleet.members},
            durations_s=durations,
            final_stop_s=final_stop,
            host_connections={h.name: h.connections for h in self.hosts},
            interactions=interactions,
            ledger_metrics=metrics,
            traffic_began=traffic_began,
            graph_reads=fleet_reads(graph_log),
            graph_log_from=graph_log[0].monotonic if graph_log else 0.0,
            limit_throttles=limit_throttles(graph_log),
            outage=outage.result() if outage is not None else None,
            takeovers=list(self._takeovers),
            notification_stats=notification_stats,
            graph_load=load,
            startup_graph_load=startup_load,
            graph_statuses=statuses,
            throttle=throttle,
            throttles_by_replica=throttles,
        )

    # --- phases ---

    async def _wait_until_ready(self, ledger: LedgerReader) -> None:
        """Hosts connected, every chat bootstrapped and the email cursor initialized: a message sent
        before then would meet first-sight rules (only a chat's newest surfaces), not steady polling."""
        deadline = time.monotonic() + self.plan.ready_timeout_s
        while time.monotonic() < deadline:
            if all(h.connected_to for h in self.hosts) and await self._subscribed():
                cursors = await ledger.chat_cursor_count()
                if cursors >= self.plan.chats and await ledger.has_email_cursor():
                    await asyncio.sleep(MAIL_CURSOR_MARGIN_S)
                    return
            await asyncio.sleep(POLL_STEP_S)
        raise TimeoutError(
            f"the fleet was not ready within {self.plan.ready_timeout_s:.0f} s (hosts connected: "
            f"{[h.connected_to for h in self.hosts]}; chat cursors: {await ledger.chat_cursor_count()} of "
            f"{self.plan.chats}; subscribed: {await self._subscribed()}); replica logs are in {self.workdir}"
        )

    async def _subscribed(self) -> bool:
        """With notifications on: both subscriptions (the chats' messages, the Inbox) exist in Graph."""
        if not self.plan.notifications:
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
        total = plan.chat_messages + plan.mails
        step = plan.traffic_s / max(1, total)
        agent_address = self.seed.agent_user.user_principal_name
        start = time.monotonic()
        for i in range(total):
            wait = start + i * step - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if (i + 1) * plan.mails // total > i * plan.mails // total:
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

    async def _disrupt(self, traffic_began: float, ledger: LedgerReader) -> None:
        watches: list[asyncio.Task[TakeoverRecord]] = []
        for disruption in sorted(self.plan.disruptions, key=lambda d: d.at_s):
            wait = traffic_began + disruption.at_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            watch = await self._apply(disruption, ledger)
            if watch is not None:
                watches.append(watch)
        for watch in watches:
            self._takeovers.append(await watch)

    async def _apply(
        self, disruption: Disruption, ledger: LedgerReader
    ) -> asyncio.Task[TakeoverRecord] | None:
        """Do it; stopping a lease role's holder returns the task that watches for its successor."""
        member = await self._target(disruption, ledger)
        on_it = tuple(h.name for h in self.hosts if h.connected_to == member.mcp_url)
        kind = disruption.kind
        took = 0.0
        exited_by_itself = True
        watch: asyncio.Task[TakeoverRecord] | None = None
        if kind is DisruptionKind.SIGKILL:
            member.kill()
            at = utc_now()
            stopped = time.monotonic()
            # Read right away: what the killed replica claimed is in the ledger now, and it pushes
            # nothing more. (Claims others make meanwhile they push themselves.)
            self._kills.append(KillRecord(member.name, at, await ledger.snapshot()))
            self._stopped.append(member)
            if disruption.lease_role is not None:
                watch = asyncio.create_task(
                    self._watch_takeover(disruption.lease_role, member, at, stopped, ledger)
                )
        elif kind is DisruptionKind.SIGTERM:
            at = utc_now()
            stopped = time.monotonic()
            took = await asyncio.to_thread(member.terminate, SIGTERM_GRACE_S)
            exited_by_itself = member.proc is not None and member.proc.returncode != -signal.SIGKILL
            self._stopped.append(member)
            if disruption.lease_role is not None:
                watch = asyncio.create_task(
                    self._watch_takeover(disruption.lease_role, member, at, stopped, ledger)
                )
        else:
            at = utc_now()
            began = time.monotonic()
            member.start()
            await asyncio.to_thread(member.wait_ready)
            took = time.monotonic() - began
            if member in self._stopped:
                self._stopped.remove(member)
        self._disruptions.append(
            DisruptionRecord(kind, member.name, at, took, on_it, exited_by_itself)
        )
        return watch

    async def _watch_takeover(
        self,
        role: str,
        stopped: ReplicaProcess,
        stopped_at: datetime,
        stopped_mono: float,
        ledger: LedgerReader,
    ) -> TakeoverRecord:
        """Read the role's lease until another replica's record is there (bounded by ``takeover_wait_s``)."""
        last = await ledger.lease(role)
        last_expires = last.expires_at if last is not None and last.holder == stopped.name else None
        deadline = stopped_mono + self.plan.takeover_wait_s
        while time.monotonic() < deadline:
            record = await ledger.lease(role)
            if record is not None and record.holder != stopped.name:
                return TakeoverRecord(
                    role,
                    stopped.name,
                    stopped_at,
                    last_expires,
                    record.holder,
                    record.renewed_at,
                    time.monotonic() - stopped_mono,
                )
            await asyncio.sleep(LEASE_POLL_S)
        return TakeoverRecord(role, stopped.name, stopped_at, last_expires)

    async def _target(self, disruption: Disruption, ledger: LedgerReader) -> ReplicaProcess:
        assert self.fleet is not None
        members = self.fleet.members
        if disruption.lease_role is not None:
            return await self._holder(disruption.lease_role, ledger)
        if disruption.replica is not None:
            named = [m for m in members if m.name == disruption.replica]
            if not named:
                raise ValueError(
                    f"no replica named {disruption.replica!r}; the fleet has "
                    f"{[m.name for m in members]}"
                )
            return named[0]
        if disruption.host is None:
            if disruption.kind is not DisruptionKind.RESTART or not self._stopped:
                raise ValueError(
                    f"{disruption} names neither a host nor a replica, and there is nothing to restart"
                )
            return self._stopped[-1]
        host = next((h for h in self.hosts if h.name == disruption.host), None)
        if host is None:
            raise ValueError(
                f"no host named {disruption.host!r}; the run has {[h.name for h in self.hosts]}"
            )
        # The host may be between replicas right now: wait (bounded) until it holds a live one.
        deadline = time.monotonic() + HOST_RECONNECT_WAIT_S
        while time.monotonic() < deadline:
            live = [m for m in members if m.alive and m.mcp_url == host.connected_to]
            if live:
                return live[0]
            await asyncio.sleep(POLL_STEP_S)
        raise TimeoutError(f"{host.name} held no live replica for {HOST_RECONNECT_WAIT_S:.0f} s")

    async def _holder(self, role: str, ledger: LedgerReader) -> ReplicaProcess:
        """The live replica named in the role's unexpired lease (a bounded wait until there is one)."""
        assert self.fleet is not None
        deadline = time.monotonic() + self.plan.takeover_wait_s
        record: LeaseRecord | None = None
        while time.monotonic() < deadline:
            record = await ledger.lease(role)
            if record is not None and not record.expired(utc_now()):
                live = [m for m in self.fleet.members if m.alive and m.name == record.holder]
                if live:
                    return live[0]
            await asyncio.sleep(LEASE_POLL_S)
        raise TimeoutError(
            f"no live replica held {lease_key(role)} within {self.plan.takeover_wait_s:.0f} s "
            f"(last record: {record})"
        )

    async def _drain(self, expected: set[MessageKey]) -> None:
        """Wait (bounded) until pushes stop arriving: everything arrived and nothing more came for
        ``drain_settled_s`` (a late duplicate would still show), or nothing came for ``drain_quiet_s``."""
        plan = self.plan
        deadline = time.monotonic() + plan.drain_max_s
        count = -1
        changed = time.monotonic()
        while time.monotonic() < deadline:
            pushes = [(p.chat_id, p.message_id) for h in self.hosts for p in h.pushes]
            now = time.monotonic()
            if len(pushes) != count:
                count, changed = len(pushes), now
            quiet = now - changed
            if quiet >= plan.drain_quiet_s or (
                quiet >= plan.drain_settled_s and expected <= set(pushes)
            ):
                return
            await asyncio.sleep(POLL_STEP_S)


class LedgerReader:
    """Reads the shared ledger straight from Azurite (not through the fault proxy)."""

    def __init__(self, backend: BlobBackend) -> None:
        self._backend = backend

    async def chat_cursor_count(self) -> int:
        return len(await self._backend.list(CURSOR_PREFIX))

    async def has_email_cursor(self) -> bool:
        return await self._backend.exists(EMAIL_CURSOR_KEY)

    async def lease(self, role: str) -> LeaseRecord | None:
        """The role's lease record; None when absent or unreadable (the caller reads again)."""
        read = await read_parsed(self._backend, lease_key(role), parse_lease)
        return read.value if read.outcome is ReadOutcome.PRESENT else None

    async def host_record(self, host_id: str) -> HostRecord | None:
        """An acknowledging host's delivery record; None when absent or unreadable (the caller reads again)."""
        read = await read_parsed(self._backend, record_key(host_id), parse_host_record)
        return read.value if read.outcome is ReadOutcome.PRESENT else None

    async def snapshot(self) -> LedgerSnapshot:
        keys = await self._backend.list(CURSOR_PREFIX)
        texts = await asyncio.gather(*(self._backend.read_text(k) for k in keys))
        cursors: dict[str, ChatCursor] = {}
        for key, text in zip(keys, texts, strict=True):
            if text is not None:
                chat_id = unquote(key[len(CURSOR_PREFIX) :].removesuffix(".json"))
                cursors[chat_id] = parse_chat_cursor(text)
        email = await self._backend.read_text(EMAIL_CURSOR_KEY)
        return LedgerSnapshot(cursors, parse_email_cursor(email) if email is not None else None)

    async def interactions(self) -> dict[MessageKey, list[tuple[str, str]]]:
        """Who recorded dispatching what (replica, action), from every day file of the interaction log."""
        found: dict[MessageKey, list[tuple[str, str]]] = defaultdict(list)
        for key in await self._backend.list(INTERACTIONS_PREFIX):
            text = await self._backend.read_text(key) or ""
            for line in text.splitlines():
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if record.get("direction") == "in" and record.get("message_id"):
                        found[(str(record.get("chat_id")), str(record["message_id"]))].append(
                            (str(record.get("replica")), str(record.get("action")))
                        )
        return dict(found)

    async def aclose(self) -> None:
        await self._backend.aclose()


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


def _percentiles(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    cuts = (
        statistics.quantiles(ordered, n=100, method="inclusive")
        if len(ordered) > 1
        else [ordered[0]] * 99
    )
    return {
        "p50": round(cuts[49], 3),
        "p95": round(cuts[94], 3),
        "max": round(ordered[-1], 3),
        "n": len(ordered),
    }


def _rule_json(rule: ProxyRule) -> dict[str, Any]:
    return {
        "fault": rule.fault.value,
        "probability": rule.probability,
        "delay_ms": rule.delay_ms,
        "methods": sorted(rule.methods) if rule.methods else None,
        "path": rule.path,
    }
