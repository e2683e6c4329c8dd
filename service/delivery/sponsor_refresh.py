"""SponsorRefresher: every replica refreshes the agent identity's sponsors on a bounded cadence.

A sponsor's powers — a message delivered bare (outside the XPIA envelope), a sponsor wait answered, a
tool-use verdict taken — come from the gate's sponsor list, so a person removed in Entra must lose
them everywhere within a known time: each replica refreshes the list every ``interval_s``. With
``shared`` (the fleet's record, see shared_sponsors) one replica per interval reads Graph and the others
take its list from the record, at its true age (one Blob read each); without it, each replica reads
Graph itself (one request per replica per interval; resolved references are kept, see
sponsor_directory). A replica with no list that finds another one reading Graph waits for its list
(shared_sponsors); one that keeps a due list while another reads, or found none, looks again after
``retry_s`` rather than a whole interval.

While the list is unreadable the last one read stands for at most ``stale_after_s`` after it was read
(a Graph hiccup does not silence every sponsor at once), then the gate is emptied: no sponsor at all —
every message enveloped, no wait answered, no verdict accepted — until a read succeeds. Never having
read it is the same as that. The gate itself drops a list ``stale_after_s`` after it was read, so a
refresh loop that died (visible in /readyz) fails closed too. Each outcome is counted in
``entrabot_sponsor_reads{outcome}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from service.delivery.shared_sponsors import Fetched, FleetSponsors
from service.delivery.sponsor_directory import SponsorResolutions, read_sponsors
from service.domain.sponsors import Sponsor, SponsorGate
from service.graph.client import GraphClient
from service.graph.errors import GraphError
from service.telemetry.metrics import ChangeMetrics

log = logging.getLogger(__name__)


class RefreshOutcome(str, Enum):
    READ = "read"  # the list was read from Graph and the gate now holds it
    SHARED = "shared"  # the list another replica read, younger than the interval, from the fleet's record
    KEPT_STALE = "kept_stale"  # unreadable; the last list, younger than stale_after_s, still stands
    FAILED_CLOSED = "failed_closed"  # unreadable for too long (or never read): no sponsor at all
    NO_DIRECTORY = "no_directory"  # no app-only client for the agent identity: no sponsor at all


@dataclass
class SponsorRefresher:
    gate: SponsorGate
    graph: GraphClient  # the agent user's: resolves references to users
    agent_identity_id: str
    # The agent identity's app-only client: Graph lists sponsors to no delegated token (see
    # service.delivery.sponsor_directory). Without it, no sponsor is ever recognised.
    directory: GraphClient | None
    interval_s: float = 120.0  # ENTRABOT_SPONSOR_REFRESH_INTERVAL_S
    stale_after_s: float = 600.0  # ENTRABOT_SPONSOR_STALE_AFTER_S
    metrics: ChangeMetrics = field(kw_only=True)
    monotonic: Callable[[], float] = time.monotonic
    # The fleet's shared record: one Graph read per interval for the whole fleet (None: this replica's own).
    shared: FleetSponsors | None = field(default=None, kw_only=True)
    retry_s: float = field(default=10.0, kw_only=True)
    _resolutions: SponsorResolutions = field(default_factory=SponsorResolutions)
    _next_read: float = float("-inf")
    _expires_at: float = float("-inf")  # when the list the gate holds from us stops counting

    async def refresh_if_due(self) -> RefreshOutcome | None:
        """Re-read when an interval has passed since the last attempt; None when not due."""
        now = self.monotonic()
        if now < self._next_read:
            return None
        self._next_read = now + self.interval_s
        return await self.refresh()

    async def refresh(self) -> RefreshOutcome:
        outcome = await self._read()
        self.metrics.sponsor_reads.labels(outcome=outcome.value).inc()
        return outcome

    async def _read(self) -> RefreshOutcome:
        if self.directory is None:
            log.warning(
                "sponsors unreadable: no app-only Graph client for the agent identity; no sponsor is "
                "recognised (set the agent identity's blueprint credentials)"
            )
            self.gate.replace_sponsors(())
            return RefreshOutcome.NO_DIRECTORY
        directory = self.directory

        async def from_graph() -> tuple[Sponsor, ...]:
            return await read_sponsors(
                directory, self.graph, self.agent_identity_id, self._resolutions
            )

        try:
            fetched = (
                Fetched(await from_graph(), from_graph=True)
                if self.shared is None
                else await self.shared.fetch(from_graph, monotonic=self.monotonic())
            )
        except GraphError as exc:
            return self._unreadable(exc)
        return self._take(fetched)

    def _take(self, fetched: Fetched) -> RefreshOutcome:
        """Hold a list at its true age: it counts until ``stale_after_s`` after it was read from Graph."""
        if fetched.sponsors is not None:
            # The gate drops the list by itself once stale, should this refresher stop running; whether
            # the last list still stands is the gate's to say, so the two can never disagree.
            expires_at = self.gate.monotonic() + self.stale_after_s - fetched.age_s
            if expires_at > self._expires_at:  # only a newer list replaces the one held
                self._expires_at = expires_at
                self.gate.replace_sponsors(fetched.sponsors, expires_at=expires_at)
        if fetched.from_graph:
            return RefreshOutcome.READ
        if fetched.sponsors is None or fetched.age_s >= self.interval_s:
            # Another replica is reading Graph now (or nobody has yet): look again soon.
            self._next_read = min(self._next_read, self.monotonic() + self.retry_s)
        if self.gate.holds_read_list():
            fresh = fetched.sponsors is not None and fetched.age_s < self.interval_s
            return RefreshOutcome.SHARED if fresh else RefreshOutcome.KEPT_STALE
        self.gate.replace_sponsors(())
        return RefreshOutcome.FAILED_CLOSED

    def _unreadable(self, exc: GraphError) -> RefreshOutcome:
        fields = {"error": type(exc).__name__, "status": exc.status}
        if self.gate.holds_read_list():
            log.warning(
                "sponsor list unreadable; keeping the last one read (dropped %.0f s after it was read)",
                self.stale_after_s,
                extra=fields,
            )
            return RefreshOutcome.KEPT_STALE
        log.warning(
            "sponsor list unreadable for too long (or never read); no sponsor is recognised until it "
            "is read: every message enveloped, no sponsor wait answered, no permission verdict taken",
            extra=fields,
        )
        self.gate.replace_sponsors(())
        return RefreshOutcome.FAILED_CLOSED
