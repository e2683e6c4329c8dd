"""One sponsor read per fleet: the replica that finds the shared list due claims the record and reads Graph.

Every replica's refresher (``sponsor_refresh``) asks ``FleetSponsors.fetch`` once per refresh interval. It
reads ``fleet/sponsors.json`` (one Blob read; rules in ``service.ledger.records.sponsor_record``):

- the list in it is younger than the interval: the replica takes it, with its age, and asks Graph nothing;
- it is due and another replica's claim on it is younger than the interval: that replica is reading
  Graph now; this one keeps what it holds (the record's list, at its true age) and asks Graph nothing;
- it holds no list at all (a fresh fleet) and another replica's claim is live: this one would have no
  sponsor meanwhile, so it watches the record (one Blob read every ``poll_s``) until the holder's list
  lands and takes it; a claim that stands ``CLAIM_PATIENCE_S`` with no list under it is abandoned (its
  holder died or hangs in Graph), and this replica claims it over and reads Graph. A replica starting
  beside the holder so begins with the sponsors, not empty until its next refresh;
- it is due and unclaimed (or the claim is this replica's own, or older than an interval: its holder
  died): the replica writes its claim with If-Match on the ETag it read (if_absent for the first), and
  only if that lands reads Graph, then writes the list with If-Match on its claim. A lost race (409/412)
  means another replica claimed first: take what the record holds, no Graph.

So a fleet costs one Graph sponsors request per interval, not one per replica: the claim decides who.
Fail closed: a list taken from the record counts only until ``stale_after_s`` after *it was read from
Graph* (its age is counted against the bound, never reset by copying), a record that does not parse or
names another agent identity is never taken, and a list is only ever replaced by a newer one. When the
store cannot be read at all, the replica reads Graph itself (as every replica did before) and writes
nothing: a storage outage costs requests, not sponsors. A Graph failure raises GraphError to the
refresher, whose staleness rules apply unchanged; the claim then lapses after an interval (or is
retaken at once by its holder).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from service.clock import Clock, utc_now
from service.domain.sponsors import Sponsor
from service.ledger.records.reads import Read, ReadOutcome, read_parsed
from service.ledger.records.sponsor_record import (
    CLAIM_PATIENCE_S,
    KEY,
    Decision,
    SponsorClaim,
    SponsorRecord,
    StampWatch,
    Step,
    decide,
    parse_record,
    render_record,
)
from service.storage.backend import MemoryBackend
from service.storage.errors import StorageError

GraphRead = Callable[[], Awaitable[tuple[Sponsor, ...]]]
# How often a replica with no list re-reads a record another replica has claimed, waiting for its list.
CLAIM_POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class Fetched:
    """A sponsor list and how old it is (seconds since it was read from Graph); ``sponsors`` None: none."""

    sponsors: tuple[Sponsor, ...] | None
    age_s: float = 0.0
    from_graph: bool = False  # this replica read it from Graph just now


@dataclass
class FleetSponsors:
    backend: MemoryBackend
    replica_id: str
    agent_identity_id: str
    interval_s: float
    clock: Clock = utc_now
    patience_s: float = CLAIM_PATIENCE_S
    poll_s: float = CLAIM_POLL_S
    pause: Callable[[float], Awaitable[None]] = asyncio.sleep
    _watch: StampWatch = field(default_factory=StampWatch)
    _claim_etag: str | None = None

    async def fetch(self, read_graph: GraphRead, *, monotonic: float) -> Fetched:
        """The fleet's current list: from the record, or read from Graph by this replica (GraphError raises).

        ``monotonic``: the caller's monotonic clock now (how long a stamp has stood is measured on it)."""
        read = await self._read()
        waited, lost_race = 0.0, False
        while True:
            if read.outcome is ReadOutcome.UNRESOLVED:
                return Fetched(await read_graph(), from_graph=True)
            # Counted on as waited at least: a claim first seen before the wait ages through it.
            decision = self._decide(read.value, monotonic + waited)
            if (
                decision.step is Step.WAIT
                and decision.list_age_s is None
                and waited < self.patience_s
            ):
                # Nothing to keep while the holder reads: watch the record for its list.
                await self.pause(self.poll_s)
                waited += self.poll_s
                read = await self._read()
                continue
            if decision.step is not Step.CLAIM or lost_race:
                return self._held(read.value, decision.list_age_s)
            claim = SponsorClaim(self.replica_id, self.clock())
            if await self._claim(read, claim):
                break
            # Another replica claimed first: take its list, or wait for it like any claim over none.
            lost_race = True
            read = await self._read()
        sponsors = await read_graph()
        listed = SponsorRecord(self.agent_identity_id, sponsors, claim.claimed_at)
        self._watch.wrote_list(claim.claimed_at, monotonic)
        try:
            await self.backend.write_text(KEY, render_record(listed), if_match=self._claim_etag)
        except StorageError:
            pass  # our claim was taken over (we were slower than an interval): the list is ours still
        return Fetched(sponsors, from_graph=True)

    async def _read(self) -> Read[SponsorRecord]:
        return await read_parsed(self.backend, KEY, self._parse)

    def _parse(self, text: str) -> SponsorRecord:
        return parse_record(text, self.agent_identity_id)

    def _decide(self, record: SponsorRecord | None, monotonic: float) -> Decision:
        return decide(
            record,
            me=self.replica_id,
            interval_s=self.interval_s,
            now=self.clock(),
            monotonic=monotonic,
            watch=self._watch,
            patience_s=self.patience_s,
        )

    async def _claim(self, read: Read[SponsorRecord], claim: SponsorClaim) -> bool:
        """Write our claim over what was read; True when it landed (a write in doubt is read back)."""
        held = read.value or SponsorRecord()
        claimed = SponsorRecord(self.agent_identity_id, held.sponsors, held.read_at, claim)
        try:
            if read.outcome is ReadOutcome.ABSENT:
                self._claim_etag = await self.backend.write_text(
                    KEY, render_record(claimed), if_absent=True
                )
            else:
                self._claim_etag = await self.backend.write_text(
                    KEY, render_record(claimed), if_match=read.etag
                )
        except StorageError:
            back = await self._read()
            if back.value is None or back.value.claim != claim or back.etag is None:
                return False
            self._claim_etag = back.etag
        return True

    @staticmethod
    def _held(record: SponsorRecord | None, age_s: float | None) -> Fetched:
        if record is None or record.sponsors is None or age_s is None:
            return Fetched(None)
        return Fetched(record.sponsors, age_s)
