"""The metric groups of the work a replica does: change detection, delivery, and its loops."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from service.telemetry.metrics.buckets import LATENCY_BUCKETS


@dataclass(frozen=True)
class ConversationMetrics:
    """One kind of conversation's poll (service.domain.conversation): its hints, the conversations
    awaiting their first sight, and those waiting for a host."""

    hints: Counter
    first_sights_pending: Gauge
    awaiting_host: Gauge


class ChangeMetrics:
    """Change detection: discovery, sponsors, hints, scans, sweeps and Graph's notifications."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self._registry = registry if registry is not None else CollectorRegistry()
        # Discovery, on the "discovery" lease holder only: its paced walk of /me/chats.
        self.discovery_pages = Counter(
            "entrabot_discovery_pages",
            "Pages of GET /me/chats read by discovery (the lease holder)",
            registry=r,
        )
        self.discovery_walks = Counter(
            "entrabot_discovery_walks",
            "Discovery walk steps by outcome: complete (reached the last page), paused "
            "(page cap reached, resumed next cycle), failed, lease_lost",
            ["outcome"],
            registry=r,
        )
        self.sponsor_reads = Counter(
            "entrabot_sponsor_reads",
            "Sponsor list refreshes by outcome: read (from Graph), shared (another replica's read, "
            "from the fleet's record), kept_stale (unreadable, last list kept), failed_closed "
            "(unreadable too long: no sponsor), no_directory",
            ["outcome"],
            registry=r,
        )
        self.chats_awaiting_host = Gauge(
            "entrabot_chats_awaiting_host",
            "Watched chats with a hinted change (most likely a new message) this replica holds no "
            "host to read it for: it waits in Graph, unclaimed, until a host connects (0 while "
            "this replica has a target that takes chat messages)",
            registry=r,
        )
        self._hints(r)
        # Chats keep the names they had before other kinds (dashboards and alerts use them).
        self._conversations = {
            "chat": ConversationMetrics(
                self.chat_hints, self.chat_first_sights_pending, self.chats_awaiting_host
            )
        }

    def conversation(self, kind: str) -> ConversationMetrics:
        """The poll metrics of one kind of conversation, registered on first use."""
        if kind not in self._conversations:
            self._conversations[kind] = ConversationMetrics(
                Counter(
                    f"entrabot_{kind}_hints",
                    f"Change hints taken by the {kind} poll, by what they led to: read, covered, "
                    "not_watched",
                    ["outcome"],
                    registry=self._registry,
                ),
                Gauge(
                    f"entrabot_{kind}_first_sights_pending",
                    f"Watched {kind}s this replica has not yet seen with a cursor",
                    registry=self._registry,
                ),
                Gauge(
                    f"entrabot_{kind}s_awaiting_host",
                    f"Watched {kind}s with a hinted change this replica holds no host to read it for",
                    registry=self._registry,
                ),
            )
        return self._conversations[kind]

    def _hints(self, r: CollectorRegistry) -> None:
        """Hints and the scans, sweeps and notifications that raise them."""
        self.chat_hints = Counter(
            "entrabot_chat_hints",
            "Change hints taken by the chat poll, by what they led to: read (the chat "
            "was read from Graph), covered (the chat cursor already covered it: no Graph read), not_watched",
            ["outcome"],
            registry=r,
        )
        self.chat_hints_written = Counter(
            "entrabot_chat_hints_written",
            "Change hints written by this replica, by source (scan, sweep)",
            ["source"],
            registry=r,
        )
        self.chat_first_sights_pending = Gauge(
            "entrabot_chat_first_sights_pending",
            "Watched chats this replica has not yet seen with a cursor "
            "(their first sight is still to be made or read back)",
            registry=r,
        )
        self.chat_scans = Counter(
            "entrabot_chat_scans",
            "Chat change scans of the elected scanner by outcome (ordered, unordered, "
            "failed, ordering_refused, hints_unwritten)",
            ["outcome"],
            registry=r,
        )
        self.chat_sweeps = Counter(
            "entrabot_chat_sweep_pages",
            "Pages of the safety sweep by outcome (swept, failed, hints_unwritten)",
            ["outcome"],
            registry=r,
        )
        self.graph_notifications = Counter(
            "entrabot_graph_notifications",
            "Graph change notifications received, by kind and outcome",
            ["kind", "outcome"],
            registry=r,
        )
        # Set by the subscription manager (the lease holder): its live subscriptions per source, so
        # chat and mail are 0 or 1 and channel counts the watched channels subscribed.
        self.notification_subscriptions = Gauge(
            "entrabot_notification_subscriptions",
            "Live Graph change-notification subscriptions kept by this "
            "replica as the subscription manager, by resource (chat, mail: 0 or 1; channel: "
            "one per subscribed channel)",
            ["resource"],
            registry=r,
        )
        self.notification_subscription_changes = Counter(
            "entrabot_notification_subscription_changes",
            "Subscription manager actions by resource and action "
            "(created, recreated, renewed, reauthorized, deleted, failed)",
            ["resource", "action"],
            registry=r,
        )


class DeliveryMetrics:
    """What happens to a claimed message on its way to a host."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.deliveries = Counter(
            "entrabot_deliveries",
            "Deliveries to hosts by channel and outcome",
            ["channel", "source", "outcome"],
            registry=r,
        )
        self.delivery_latency = Histogram(
            "entrabot_delivery_latency_seconds",
            "Message creation time to push",
            ["source"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # Acknowledged delivery (docs/delivery.md): hosts that name themselves acknowledge what they wrote.
        self.pending_deliveries = Gauge(
            "entrabot_pending_deliveries",
            "Messages claimed for the acknowledging hosts this replica serves and "
            "not acknowledged yet, by age since the claim's intent (lt_15s, lt_60s, lt_300s, older)",
            ["age"],
            registry=r,
        )
        self.redeliveries = Counter(
            "entrabot_redeliveries",
            "Owed messages pushed again: unacknowledged past the bound on the same session, "
            "or to a new session of the host",
            ["reason"],
            registry=r,
        )
        self._acknowledgements(r)

    def _acknowledgements(self, r: CollectorRegistry) -> None:
        """Acknowledgements, moves, reactions and the targets that take deliveries."""
        self.ack_latency = Histogram(
            "entrabot_ack_latency_seconds",
            "First push to the host's acknowledgement written to its record",
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60),
            registry=r,
        )
        self.lapsed_intents = Counter(
            "entrabot_lapsed_intents",
            "Intents whose claim never landed (never) or can no longer be told from the "
            "cursor (ambiguous)",
            ["fate"],
            registry=r,
        )
        self.moved_deliveries = Counter(
            "entrabot_moved_deliveries",
            "Owed messages moved by the delivery sweep to another live host",
            registry=r,
        )
        self.ack_reactions = Counter(
            "entrabot_ack_reactions",
            "Reactions the agent user set on acknowledged Teams chat messages "
            "(ENTRABOT_DELIVERY_ACK_REACTION), by outcome: set, dropped, throttled, failed, unknown",
            ["outcome"],
            registry=r,
        )
        self.push_streams = Gauge(
            "entrabot_push_streams", "Open push streams on this replica", registry=r
        )
        self.sponsor_waits = Gauge(
            "entrabot_sponsor_waits", "Pending sponsor waits on this replica", registry=r
        )
        self.inbox_calls = Counter(
            "entrabot_inbox_calls",
            "receive_messages calls answered here, by outcome: messages, empty (the wait ran out), "
            "refused (a cursor not this host's), unavailable (its record could not be read)",
            ["outcome"],
            registry=r,
        )
        self.inbox_hosts = Gauge(
            "entrabot_inbox_hosts",
            "Inbox hosts this replica claims for (called receive_messages within the retention window)",
            registry=r,
        )


class LoopMetrics:
    """The supervisor's loops."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.loop_lag = Gauge(
            "entrabot_loop_lag_seconds",
            "How late the last cycle of a loop started",
            ["loop"],
            registry=r,
        )
        self.loop_up = Gauge("entrabot_loop_up", "1 while a loop is running", ["loop"], registry=r)
        self.loop_cycles = Counter(
            "entrabot_loop_cycles",
            "Completed cycles by loop and outcome",
            ["loop", "outcome"],
            registry=r,
        )
