"""One replica's object graph: settings → backend → Graph → ledger → workers → MCP, and its lifecycle.

``service.replica_build.build_replica`` makes the clients (``service.replica_clients.build_clients``, as the harnesses do); ``Replica.start`` has ``service.wiring.wire_workers`` build the
workers and tool dependencies (the same function the test harnesses call) and schedules the loops.
Nothing reaches these objects through a global: the app factory holds a ``Replica``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum

import httpx

from service.config import Settings
from service.delivery.ack_reactions import INTERVAL_S as ACK_REACTIONS_INTERVAL_S
from service.delivery.host_keeper import TICK_S as KEEPER_TICK_S
from service.replica_clients import (
    ReplicaClients,
    answered_later,
    load_agent_user,
    naming_graph_url,
)
from service.graph.errors import GraphError
from service.ledger.fleet.local_poll_state import note_ignored_local_poll_state
from service.ledger.memory.watched_chats import WatchedChats
from service.clock import Clock, utc_now
from service.ledger.claims.corrupt_cursors import CorruptCursors
from service.ledger.fleet.graph_backoff import READ_EVERY_S
from service.mcp.server import McpService
from service.notifications.nudge import first_of
from service.notifications.subscriptions import ROLE as SUBSCRIPTIONS_ROLE
from service.notifications.wiring import Notifications
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import Metrics
from service.tools.registry import register_tools
from service.domain.agent import AgentUser
from service.workers.chat_poll import ChatPoller
from service.ledger.fleet.leases import Lease
from service.workers.delivery_sweep import ROLE as DELIVERY_SWEEP_ROLE, DeliverySweep
from service.workers.supervisor import Supervisor
from service.wiring import DeliveryHalf, wire_workers

log = logging.getLogger(__name__)

AGENT_LOOKUP_ATTEMPTS = 3  # only while Graph answers 5xx or 429
SUMMARY_INTERVAL_S = 60.0
SHUTDOWN_GRACE_S = 5.0


class Phase(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


@dataclass(frozen=True)
class Served:
    """What the replica serves: the hosts' MCP endpoint, Graph's change notifications (when a URL is
    set) and acknowledged delivery."""

    mcp: McpService
    notifications: Notifications | None
    delivery: DeliveryHalf  # from claim to acknowledgement (service.wiring.wire_delivery)


@dataclass
class Running:
    """What ``Replica.start`` made and ``drain`` winds down."""

    chat_poller: ChatPoller | None = None
    watched: WatchedChats | None = None
    delivery_sweep: DeliverySweep | None = None
    supervisor_task: asyncio.Task[None] | None = None
    # Every fleet-role lease this replica may hold, released on SIGTERM so a successor takes each
    # role at once instead of a lease ttl later (35 s for discovery, 5 min for the delivery sweep).
    leases: list[Lease] = field(default_factory=list)


@dataclass
class Replica:
    """The objects of one replica and their lifecycle (``start`` / ``stop``). ``clients.gate`` is
    empty until discovery reads the sponsors; ``clients.graph_backoff`` is the fleet's shared Graph
    hold, read and written by a loop."""

    settings: Settings
    backend: MemoryBackend
    is_cloud: bool
    http: httpx.AsyncClient
    clients: ReplicaClients
    served: Served
    metrics: Metrics
    replica_id: str
    clock: Clock = utc_now
    supervisor: Supervisor = field(init=False)
    corrupt_cursors: CorruptCursors = field(init=False)
    phase: Phase = Phase.STARTING
    agent: AgentUser | None = None
    startup_error: str | None = None  # why start() failed, for the one line `serve` prints
    running: Running = field(default_factory=Running)

    def __post_init__(self) -> None:
        self.supervisor = Supervisor(metrics=self.metrics.loops)
        self.corrupt_cursors = CorruptCursors(self.metrics.ledger)

    # --- lifecycle ---

    async def start(self) -> None:
        """Check the backend, learn who the agent is, wire the workers and tools, start the loops."""
        await self.backend.check()  # before any Graph call: a bad store starts nothing
        log.info("state backend resolved: %s", self.backend.describe())
        await note_ignored_local_poll_state(self.settings.data_dir, is_cloud=self.is_cloud)
        # A replica (re)started during an outage holds from its first request.
        await self.clients.graph_backoff.cycle()
        self.agent = await self._load_agent()
        s = self.settings
        wired = await wire_workers(
            settings=s,
            backend=self.backend,
            is_cloud=self.is_cloud,
            graph=self.clients.graph,
            delivery=self.served.delivery,
            agent=self.agent,
            gate=self.clients.gate,
            replica_id=self.replica_id,
            metrics=self.metrics,
            clock=self.clock,
            directory=self.clients.directory,
            corrupt_cursors=self.corrupt_cursors,
            notifications_flowing=self.served.notifications.chat_subscription_live
            if self.served.notifications
            else None,
        )
        self.running.watched, self.running.chat_poller, discovery = (
            wired.watched,
            wired.chat_poller,
            wired.discovery,
        )
        register_tools(self.served.mcp.tools, wired.tool_deps, self.served.delivery.inbox)
        self.running.leases += [role.lease for role in wired.chat_poller.roles]
        self.running.leases.append(discovery.lease)
        sup = self.supervisor
        # Sponsors and chat members first: a sponsor wait is only as good as the gate behind it.
        await discovery.cycle()
        sup.add(
            "chat_poll",
            self.running.chat_poller.cycle,
            interval_s=s.chat_poll_interval_s,
            jitter_s=s.chat_poll_jitter_s,
            wake=self.served.delivery.hub.wait_for_change,
        )
        if wired.channel_poller is not None:
            self.running.leases += [role.lease for role in wired.channel_poller.roles]
            sup.add(
                "channel_poll",
                wired.channel_poller.cycle,
                interval_s=s.chat_poll_interval_s,
                jitter_s=s.chat_poll_jitter_s,
                wake=self.served.delivery.hub.wait_for_change,
            )
        email_wake: Callable[[], Awaitable[None]] = self.served.delivery.hub.wait_for_change
        if self.served.notifications is not None:
            mail_nudge, email_poller = self.served.notifications.mail_nudge, wired.email_poller

            async def mail_announced() -> None:
                await mail_nudge.wait()
                email_poller.poll_now()

            email_wake = first_of(self.served.delivery.hub.wait_for_change, mail_announced)
            lease = Lease(
                self.backend,
                SUBSCRIPTIONS_ROLE,
                self.replica_id,
                clock=self.clock,
                metrics=self.metrics.roles,
            )
            self.running.leases.append(lease)
            manager = self.served.notifications.manager(
                self.clients.graph, self.agent.object_id, lease
            )
            sup.add(
                "subscriptions",
                manager.cycle,
                interval_s=manager.interval_s,
                wake=manager.poked.wait,
            )
        sup.add(
            "email_poll",
            wired.email_poller.cycle,
            interval_s=s.email_poll_interval_s,
            wake=email_wake,
        )
        # The first cycle ran above. The loop runs at the discovery lease's renewal cadence; the walk
        # (agent-user mode only) and the snapshot reads keep discovery_interval_s.
        sup.add(
            "discovery",
            discovery.cycle,
            interval_s=discovery.interval_s,
            first_after_s=discovery.interval_s,
        )
        sup.add("daily_summary", _discard(wired.summary.run_if_due), interval_s=SUMMARY_INTERVAL_S)
        keeper = self.served.delivery.keeper
        sup.add("host_deliveries", keeper.cycle, interval_s=KEEPER_TICK_S)
        inbox = self.served.delivery.inbox
        sup.add("inbox_hosts", inbox.cycle, interval_s=min(inbox.timing.scan_s, KEEPER_TICK_S * 5))
        ttl = timedelta(seconds=s.delivery_sweep_lease_ttl_s)
        lease = Lease(
            self.backend,
            DELIVERY_SWEEP_ROLE,
            self.replica_id,
            ttl=ttl,
            margin=ttl / 10,
            clock=self.clock,
            metrics=self.metrics.roles,
        )
        self.running.leases.append(lease)
        self.running.delivery_sweep = DeliverySweep(
            lease,
            keeper.records,
            keeper.lookup,
            interval_s=s.delivery_sweep_interval_s,
            move_after_s=s.delivery_move_after_s,
            clock=self.clock,
            metrics=self.metrics.delivery,
        )
        # Often enough to renew the lease in time (a short one in tests).
        sup.add(
            "delivery_sweep",
            self.running.delivery_sweep.cycle,
            interval_s=min(s.delivery_sweep_interval_s, 10.0, lease.renew_every.total_seconds()),
        )
        reactions = self.served.delivery.reactions
        if reactions is not None:
            sup.add(
                "ack_reactions",
                reactions.cycle,
                interval_s=ACK_REACTIONS_INTERVAL_S,
                wake=reactions.wait_for_work,
            )
        sup.add(
            "graph_backoff",
            self.clients.graph_backoff.cycle,
            interval_s=READ_EVERY_S,
            wake=self.clients.graph_backoff.announced,
        )
        self.running.supervisor_task = asyncio.create_task(sup.run(), name="supervisor")
        self.phase = Phase.RUNNING

    async def drain(self) -> None:
        """SIGTERM, first step: stop claiming at once and let the cycle in flight push what it has
        claimed, while the hosts' streams are still open."""
        self.phase = Phase.STOPPING
        self.served.delivery.hub.close()
        self.supervisor.stop()
        running = self.running
        if running.supervisor_task is not None and not running.supervisor_task.done():
            try:
                await asyncio.wait_for(asyncio.shield(running.supervisor_task), SHUTDOWN_GRACE_S)
            except TimeoutError:
                log.warning("loops did not stop within %.0f s; cancelling them", SHUTDOWN_GRACE_S)
                running.supervisor_task.cancel()
        if running.supervisor_task is None:
            return  # never started: it holds nothing
        # After the loops: a cycle in flight could otherwise take a released role back. Each
        # release is best effort (a lease not released expires by itself).
        for lease in running.leases:
            await lease.release()
        if running.chat_poller is not None and running.chat_poller.turns.readers is not None:
            # The others stop waiting for this replica's turns.
            await running.chat_poller.turns.readers.leave()

    async def stop(self) -> None:
        """Drain (if not done yet), then release the clients."""
        await self.drain()
        await self.served.delivery.background.aclose()
        await self.clients.graph.aclose()
        await self.http.aclose()
        await self.backend.aclose()
        self.phase = Phase.STOPPED
        log.info("replica stopped cleanly")

    async def _load_agent(self) -> AgentUser:
        """GET /me, the first Graph call. Retried here only when Graph answered "later" (a 5xx or a
        429, each already retried by the client); no answer at all, or a refusal, ends start-up at
        once with one line naming the setting to check."""
        delay = 1.0
        for attempt in range(1, AGENT_LOOKUP_ATTEMPTS + 1):
            try:
                return await load_agent_user(
                    self.clients.graph, posts_as_person=self.settings.auth_mode == "delegated"
                )
            except GraphError as exc:
                if attempt == AGENT_LOOKUP_ATTEMPTS or not answered_later(exc):
                    raise naming_graph_url(exc, self.settings.graph_url) from None
                log.warning("GET /me failed (%s); retrying in %.0f s", type(exc).__name__, delay)
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    # --- readiness ---

    @property
    def watched_count(self) -> int:
        return len(self.running.watched.chats) if self.running.watched is not None else 0


def _discard(run: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
    """A loop cycle from a coroutine whose result the supervisor has no use for."""

    async def cycle() -> None:
        await run()

    return cycle
