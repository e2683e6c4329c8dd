"""What one fleet run saw: what was sent and pushed and the account of it, what was done to the
fleet and how it took it, and what the replicas asked of Graph. ``FleetResult.summary`` is the JSON
the tests print and the benchmarks keep."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from service.devstack.channel_host import ReceivedPush
from service.devstack.delivery_account import (
    DeliveryAccount,
    KillRecord,
    Loss,
    SentMessage,
)
from service.domain.message import MessageKey
from service.devstack.fault_proxy import ProxyRule, ProxyStats
from service.devstack.fleet_plan import DisruptionKind, FleetPlan
from service.devstack.graph_load import GraphLoad
from service.devstack.graph_outage import OutageWindow, rate


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


@dataclass(frozen=True)
class FaultRecord:
    """What was done to the fleet while the traffic ran, and how it took it."""

    kills: list[KillRecord]
    disruptions: list[DisruptionRecord]
    proxy: ProxyStats
    takeovers: list[TakeoverRecord] = field(default_factory=list)


@dataclass(frozen=True)
class GraphRecord:
    """What the replicas asked of Graph and how it answered, from the emulator's logs and counters."""

    traffic_began: float = 0.0  # monotonic, as the emulator's request log
    # When each of the replicas' Graph reads arrived (monotonic), from the emulator's log, which keeps
    # the most recent requests only: it is complete from ``log_from`` on.
    reads: list[float] = field(default_factory=list)
    log_from: float = 0.0
    # When Graph's limits (not an injected fault) answered a replica's read with 429, from the same log.
    limit_throttles: list[float] = field(default_factory=list)
    outage: OutageWindow | None = None
    # The emulator's notification delivery counters (sent, dropped, duplicated...), with notifications on.
    notification_stats: dict[str, int] | None = None
    # The replicas' Graph requests by route from traffic start to the end of the drain, and before
    # it (start-up: the replicas' first reads of every chat).
    load: GraphLoad | None = None
    startup_load: GraphLoad | None = None
    # Every request the emulator answered during the whole run (start-up too), by route and status.
    statuses: dict[str, dict[str, int]] = field(default_factory=dict)
    # The emulator's throttle at the end: per Graph limit, its figure and what it admitted and throttled.
    throttle: dict[str, Any] = field(default_factory=dict)
    # The 429s each replica alive at the end says it got (entrabot_graph_throttles_total), by replica.
    throttles_by_replica: dict[str, float] = field(default_factory=dict)

    def read_rates(self) -> dict[str, float] | None:
        """The fleet's Graph reads per second before, during and after the outage (None without one)."""
        window = self.outage
        if window is None:
            return None
        last_read = max(self.reads, default=window.ended)
        after_ends = max(
            window.ended + 1.0, min(window.ended + window.outage.duration_s, last_read)
        )
        windows = {
            "before": (self.traffic_began, window.began),
            "during": (window.began, window.ended),
            "after": (window.ended, after_ends),
        }
        return {name: round(rate(self.reads, a, b), 3) for name, (a, b) in windows.items()}


@dataclass
class FleetResult:
    plan: FleetPlan
    workdir: Path
    sent: list[SentMessage]
    pushes: list[ReceivedPush]
    account: DeliveryAccount
    faults: FaultRecord
    graph: GraphRecord
    replica_of_url: dict[str, str]
    durations_s: dict[str, float]
    final_stop_s: dict[str, float]
    # How many MCP sessions each host opened (more than one: it failed over).
    host_connections: dict[str, int]
    # (chat_id, message_id) -> [(replica, action)] from the interaction log: who says it dispatched what.
    interactions: dict[MessageKey, list[tuple[str, str]]] = field(default_factory=dict)
    # Ledger counters summed over the replicas alive at the end (a restarted one counts since its restart).
    ledger_metrics: dict[str, dict[str, float]] = field(default_factory=dict)

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
        plan, faults, graph = self.plan, self.faults, self.graph
        return {
            "plan": {
                "replicas": plan.fleet.replicas,
                "hosts": plan.fleet.hosts,
                "chats": plan.traffic.chats,
                "chat_poll_s": plan.fleet.chat_poll_s,
                "email_poll_s": plan.fleet.email_poll_s,
                "traffic_s": plan.traffic.traffic_s,
                "random_seed": plan.random_seed,
                "proxy_rules": [_rule_json(r) for r in plan.faults.proxy_rules],
                "notifications": plan.fleet.notifications,
                "chats_orderby": plan.traffic.chats_orderby,
                "notification_faults": [
                    r.model_dump(exclude_defaults=True) for r in plan.faults.notification_faults
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
                for d in faults.disruptions
            ],
            "ledger_metrics_of_live_replicas": self.ledger_metrics,
            "fault_proxy": {
                "requests": faults.proxy.requests,
                "forwarded": faults.proxy.forwarded,
                "commit_then_drop": faults.proxy.commit_then_drop,
                "fail_before": faults.proxy.fail_before,
                "delayed": faults.proxy.delayed,
                "upstream_errors": faults.proxy.upstream_errors,
            },
            "latency_s": {"chat": _percentiles(chat_latency), "mail": _percentiles(mail_latency)},
            "durations_s": {k: round(v, 1) for k, v in self.durations_s.items()},
            "graph_reads_per_s": graph.read_rates(),
            "graph_load": None if graph.load is None else graph.load.as_dict(),
            "startup_graph_load": None
            if graph.startup_load is None
            else graph.startup_load.as_dict(),
            "takeovers": [t.as_json() for t in faults.takeovers],
            "notification_stats": graph.notification_stats,
            "throttle_by_limit": graph.throttle,
            "throttles_by_replica": graph.throttles_by_replica,
            "final_sigterm_s": {k: round(v, 2) for k, v in self.final_stop_s.items()},
            "workdir": str(self.workdir),
        }

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
