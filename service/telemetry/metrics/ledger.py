"""The metric groups of the shared ledger: claims and cursors, and the fleet roles beside them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class LedgerMetrics:
    """Claims and cursors in the shared ledger, and the records written beside them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
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
        self._records(r)

    def _records(self, r: CollectorRegistry) -> None:
        """The records written beside the claims: intents, the watched list, chat members."""
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
        self.watched_chats = Gauge(
            "entrabot_watched_chats", "Chats in the watched list", registry=r
        )
        self._watched = {"chat": self.watched_chats}
        self._registry = r
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

    def watched(self, kind: str) -> Gauge:
        """The size of one kind's watched list (chats keep their metric's name), registered on first use."""
        if kind not in self._watched:
            self._watched[kind] = Gauge(
                f"entrabot_watched_{kind}s",
                f"{kind.capitalize()}s in the watched list",
                registry=self._registry,
            )
        return self._watched[kind]


class RoleMetrics:
    """The fleet's shared roles: leases and the fleet-wide Graph back-off."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
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
