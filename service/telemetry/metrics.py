"""The service's Prometheus metrics, held by one object that the app wires at start-up.

Every component takes an optional ``Metrics``; tests build their own (each on a private registry)
so nothing is process-global and two apps in one test process never collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

_LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300)
# Time to the response's first byte: /mcp POSTs answer within a tool call; GET streams start at once.
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_IO_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    """Every metric SPEC §7 names. Label values are small closed sets, never ids or text."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # CPU seconds, resident memory and open file descriptors of this process (process_*), read
        # from /proc on Linux; elsewhere the collector exports nothing.
        ProcessCollector(registry=r)
        # HTTP, for /mcp (labels: method, status class; the path is fixed so none is recorded).
        self.mcp_http_requests = Counter(
            "entrabot_mcp_http_requests",
            "HTTP requests to /mcp by method and status class",
            ["method", "status"],
            registry=r,
        )
        self.mcp_http_duration = Histogram(
            "entrabot_mcp_http_request_duration_seconds",
            "Time from a /mcp request to its response's start",
            ["method"],
            buckets=_HTTP_BUCKETS,
            registry=r,
        )
        self.mcp_http_in_flight = Gauge(
            "entrabot_mcp_http_in_flight",
            "/mcp requests being handled (GET streams included)",
            registry=r,
        )
        # Ledger
        self.claims = Counter(
            "entrabot_claims",
            "Claim attempts by ledger and outcome",
            ["ledger", "outcome"],
            registry=r,
        )
        self.claimed_messages = Counter(
            "entrabot_claimed_messages", "Messages won in the shared ledger", ["ledger"], registry=r
        )
        self.cas_conflicts = Counter(
            "entrabot_cas_conflicts",
            "Compare-and-swap writes that lost a race",
            ["ledger"],
            registry=r,
        )
        self.graph_notifications = Counter(
            "entrabot_graph_notifications",
            "Graph change notifications received, by kind and outcome",
            ["kind", "outcome"],
            registry=r,
        )
        self.lease_held = Gauge(
            "entrabot_lease_held",
            "1 while this replica holds the fleet-singleton role's lease, 0 for every other role it knows",
            ["role"],
            registry=r,
        )
        self.lease_events = Counter(
            "entrabot_lease_events",
            "Lease changes: acquired, taken_over, lost, conflict; unreadable (a record that cannot be trusted "
            "seen), taken_unreadable (taken over after it stood a lease lifetime)",
            ["role", "event"],
            registry=r,
        )
        # Discovery, on the "discovery" lease holder only: its paced walk of /me/chats.
        self.discovery_pages = Counter(
            "entrabot_discovery_pages",
            "Pages of GET /me/chats read by discovery (the lease holder)",
            registry=r,
        )
        self.sponsor_reads = Counter(
            "entrabot_sponsor_reads",
            "Sponsor list refreshes by outcome: read, kept_stale (unreadable, last list "
            "kept), failed_closed (unreadable too long: no sponsor), no_directory",
            ["outcome"],
            registry=r,
        )
        self.discovery_walks = Counter(
            "entrabot_discovery_walks",
            "Discovery walk steps by outcome: complete (reached the last page), paused "
            "(page cap reached, resumed next cycle), failed, lease_lost",
            ["outcome"],
            registry=r,
        )
        # The shared chat members snapshot (watched/members.json): read by every replica, merged by the
        # discovery holder and by create_chat.
        self.chat_members_snapshot_reads = Counter(
            "entrabot_chat_members_snapshot_reads",
            "Reads of the shared chat members snapshot by outcome: changed, "
            "unchanged, absent, corrupt, unreadable",
            ["outcome"],
            registry=r,
        )
        self.chat_members_snapshot_writes = Counter(
            "entrabot_chat_members_snapshot_writes",
            "Merges into the shared chat members snapshot by outcome: written, unchanged, failed",
            ["outcome"],
            registry=r,
        )
        self.chat_members_snapshot_chats = Gauge(
            "entrabot_chat_members_snapshot_chats",
            "Chats in the members snapshot this replica last loaded",
            registry=r,
        )
        # Set by the subscription manager (the lease holder): 1 per live subscription it keeps.
        self.notification_subscriptions = Gauge(
            "entrabot_notification_subscriptions",
            "Live Graph change-notification subscriptions kept by this "
            "replica as the subscription manager, by resource (chat, mail)",
            ["resource"],
            registry=r,
        )
        self.notification_subscription_changes = Counter(
            "entrabot_notification_subscription_changes",
            "Subscription manager actions by resource and action "
            "(created, recreated, renewed, reauthorized, failed)",
            ["resource", "action"],
            registry=r,
        )
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
        self.email_settle = Counter(
            "entrabot_email_settle",
            "Settlements of uncertain email claims by outcome",
            ["outcome"],
            registry=r,
        )
        self.chat_settle = Counter(
            "entrabot_chat_settle",
            "Settlements of uncertain chat claim writes by outcome",
            ["outcome"],
            registry=r,
        )
        self.chat_unsettled = Gauge(
            "entrabot_chat_unsettled", "Chats whose last claim write is still in doubt", registry=r
        )
        self.chat_cursors_corrupt = Gauge(
            "entrabot_chat_cursors_corrupt",
            "Chats whose shared cursor this replica found corrupt: no deliveries until repaired (repair-chat)",
            registry=r,
        )
        self.email_hold = Gauge(
            "entrabot_email_hold", "1 while an email batch is held awaiting settlement", registry=r
        )
        # Delivery
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
            buckets=_LATENCY_BUCKETS,
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
        self.claim_intent = Histogram(
            "entrabot_claim_intent_seconds",
            "What writing a claim's intent added to the claim's path, before its "
            "write (0 for a claim with no acknowledging host): after_read, the whole intent write after the claim "
            "decided (on the cursor read that preceded the Graph read, or on a read that named other messages); "
            "beside_read, the wait for the intent after a cursor read of the claim's own returned",
            ["path"],
            buckets=(
                0.0005,
                0.001,
                0.002,
                0.003,
                0.005,
                0.0075,
                0.01,
                0.015,
                0.025,
                0.05,
                0.1,
                0.25,
                1,
            ),
            registry=r,
        )
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
        self.sessions = Gauge(
            "entrabot_mcp_sessions", "Live MCP sessions on this replica", registry=r
        )
        self.push_streams = Gauge(
            "entrabot_push_streams", "Open push streams on this replica", registry=r
        )
        self.sponsor_waits = Gauge(
            "entrabot_sponsor_waits", "Pending sponsor waits on this replica", registry=r
        )
        # Graph
        self.graph_requests = Counter(
            "entrabot_graph_requests",
            "Graph requests by route and status",
            ["route", "status"],
            registry=r,
        )
        self.graph_throttles = Counter(
            "entrabot_graph_throttles", "Graph 429 answers by route", ["route"], registry=r
        )
        self.graph_holds = Counter(
            "entrabot_graph_holds",
            "Holds of every Graph request of this replica, by cause: throttled (429 with "
            "Retry-After), unavailable (5xx with Retry-After), backoff (429/502/503/504 without), fleet (another "
            "replica's, read from the shared backoff)",
            ["cause"],
            registry=r,
        )
        self.graph_fleet_backoff_seconds = Gauge(
            "entrabot_graph_fleet_backoff_seconds",
            "Seconds left of the fleet-wide Graph hold as this replica last read it (0: none)",
            registry=r,
        )
        self.graph_fleet_backoff_events = Counter(
            "entrabot_graph_fleet_backoff_events",
            "Shared Graph backoff record: written, already (a longer hold "
            "was stored), conflict, read_failed, corrupt, implausible",
            ["event"],
            registry=r,
        )
        self.graph_malformed_items = Counter(
            "entrabot_graph_malformed_items",
            "Graph items skipped as unreadable, by kind",
            ["kind"],
            registry=r,
        )
        self.token_requests = Counter(
            "entrabot_token_requests",
            "Token endpoint requests by hop and outcome",
            ["hop", "outcome"],
            registry=r,
        )
        # Blob
        self.blob_operations = Counter(
            "entrabot_blob_operations",
            "Storage operations by op, outcome and area (the key's first path segment: "
            "chat_cursors, deliveries, leases…; container for the container's own)",
            ["op", "outcome", "area"],
            registry=r,
        )
        self.blob_latency = Histogram(
            "entrabot_blob_operation_seconds",
            "Storage operation latency by op and area (as for entrabot_blob_operations_total)",
            ["op", "area"],
            buckets=_IO_BUCKETS,
            registry=r,
        )
        # Loops
        self.watched_chats = Gauge(
            "entrabot_watched_chats", "Chats in the watched list", registry=r
        )
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
