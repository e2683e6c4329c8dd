"""The fleet's shared sponsor record: one replica per interval claims it and reads Graph, the others take
its list (at its true age) from the record. Rules as pure functions, then the shell on each store kind
(LocalBackend, then Blob on Azurite), with a counting stand-in for Graph's sponsor read."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from service.delivery.shared_sponsors import FleetSponsors
from service.domain.sponsors import Sponsor
from service.graph.errors import GraphError
from service.ledger.records.sponsor_record import (
    CLAIM_PATIENCE_S,
    KEY,
    SponsorClaim,
    SponsorRecord,
    StampWatch,
    Step,
    decide,
    parse_record,
    render_record,
)
from service.storage.backend import MemoryBackend
from tests.ledger.ledger_helpers import T0, FakeClock

IDENTITY = "agent-identity-1"
ADA = Sponsor("ada-id", "ada@contoso.com", "ada@contoso.com", "Ada Lovelace")
INTERVAL = 120.0


class CountingGraph:
    """Stands in for Graph's sponsor list: counts reads; ``failing`` makes each read raise."""

    def __init__(self, sponsors: tuple[Sponsor, ...] = (ADA,)) -> None:
        self.sponsors = sponsors
        self.reads = 0
        self.failing = False

    async def __call__(self) -> tuple[Sponsor, ...]:
        self.reads += 1
        await asyncio.sleep(0)  # let racing replicas interleave
        if self.failing:
            raise GraphError("sponsors unreadable", status=503)
        return self.sponsors


def fleet(backend: MemoryBackend, clock: FakeClock, n: int = 3) -> list[FleetSponsors]:
    return [
        FleetSponsors(backend, f"replica-{i}", IDENTITY, INTERVAL, clock=clock) for i in range(n)
    ]


def test_a_record_round_trips_and_one_that_is_not_ours_holds_no_list() -> None:
    record = SponsorRecord(IDENTITY, (ADA,), T0, SponsorClaim("replica-0", T0))
    assert parse_record(render_record(record), IDENTITY) == record
    assert parse_record(render_record(record), "another-identity") == SponsorRecord()
    assert parse_record("{not json", IDENTITY) == SponsorRecord()
    assert parse_record('{"agent_identity_id": "agent-identity-1", "read_at": 5}', IDENTITY) == (
        SponsorRecord()
    )


def test_a_list_younger_than_the_interval_is_adopted_and_an_older_one_claimed() -> None:
    watch = StampWatch()
    record = SponsorRecord(IDENTITY, (ADA,), T0)
    fresh = decide(record, me="r", interval_s=INTERVAL, now=T0, monotonic=0.0, watch=watch)
    assert fresh.step is Step.ADOPT and fresh.list_age_s == 0.0
    later = T0 + timedelta(seconds=INTERVAL)
    due = decide(record, me="r", interval_s=INTERVAL, now=later, monotonic=1.0, watch=watch)
    assert due.step is Step.CLAIM and due.list_age_s == INTERVAL
    assert decide(None, me="r", interval_s=INTERVAL, now=T0, monotonic=0.0, watch=watch).step is (
        Step.CLAIM
    )


def test_a_stamp_that_stood_a_whole_interval_is_due_whatever_the_writers_clock_says() -> None:
    # The writer's clock runs an hour ahead: by wall clocks the list looks new forever.
    watch = StampWatch()
    record = SponsorRecord(IDENTITY, (ADA,), T0 + timedelta(hours=1))
    assert decide(record, me="r", interval_s=INTERVAL, now=T0, monotonic=0.0, watch=watch).step is (
        Step.ADOPT
    )
    step = decide(record, me="r", interval_s=INTERVAL, now=T0, monotonic=INTERVAL, watch=watch).step
    assert step is Step.CLAIM


def test_another_replicas_live_claim_is_waited_for_and_an_abandoned_one_taken() -> None:
    watch = StampWatch()
    record = SponsorRecord(IDENTITY, (ADA,), T0, SponsorClaim("other", T0 + timedelta(seconds=200)))
    now = T0 + timedelta(seconds=200)
    waiting = decide(record, me="r", interval_s=INTERVAL, now=now, monotonic=0.0, watch=watch)
    assert waiting.step is Step.WAIT and waiting.list_age_s == 200.0
    lapsed = now + timedelta(seconds=INTERVAL)
    assert decide(
        record, me="r", interval_s=INTERVAL, now=lapsed, monotonic=1.0, watch=watch
    ).step is (Step.CLAIM)
    mine = SponsorRecord(IDENTITY, (ADA,), T0, SponsorClaim("r", now))
    assert decide(mine, me="r", interval_s=INTERVAL, now=now, monotonic=2.0, watch=watch).step is (
        Step.CLAIM
    )


async def test_three_replicas_cost_one_graph_read_per_interval(any_backend: MemoryBackend) -> None:
    clock, graph = FakeClock(), CountingGraph()
    replicas = fleet(any_backend, clock)
    for interval in range(3):
        monotonic = interval * INTERVAL
        fetched = [await r.fetch(graph, monotonic=monotonic) for r in replicas]
        assert [f.sponsors for f in fetched] == [(ADA,)] * 3
        assert sum(f.from_graph for f in fetched) == 1
        assert graph.reads == interval + 1
        clock.advance(seconds=INTERVAL)


async def test_replicas_racing_for_a_due_list_read_graph_once(any_backend: MemoryBackend) -> None:
    clock, graph = FakeClock(), CountingGraph()
    replicas = fleet(any_backend, clock, n=4)
    fetched = await asyncio.gather(*(r.fetch(graph, monotonic=0.0) for r in replicas))
    assert graph.reads == 1 and sum(f.from_graph for f in fetched) == 1
    # A loser found the claim and no list yet: it waited for the winner's list (never a guess).
    assert [f.sponsors for f in fetched] == [(ADA,)] * 4
    again = [await r.fetch(graph, monotonic=1.0) for r in replicas]
    assert [f.sponsors for f in again] == [(ADA,)] * 4 and graph.reads == 1


async def test_a_list_taken_from_the_record_keeps_its_age(any_backend: MemoryBackend) -> None:
    clock, graph = FakeClock(), CountingGraph()
    first, second = fleet(any_backend, clock, n=2)
    await first.fetch(graph, monotonic=0.0)
    clock.advance(seconds=90)
    taken = await second.fetch(graph, monotonic=0.0)
    assert (taken.sponsors, taken.age_s, taken.from_graph) == ((ADA,), 90.0, False)


async def test_while_graph_fails_the_claimer_raises_and_the_others_keep_the_aging_list(
    any_backend: MemoryBackend,
) -> None:
    clock, graph = FakeClock(), CountingGraph()
    first, second = fleet(any_backend, clock, n=2)
    await first.fetch(graph, monotonic=0.0)
    clock.advance(seconds=INTERVAL)
    graph.failing = True
    with pytest.raises(GraphError):
        await first.fetch(graph, monotonic=INTERVAL)
    held = await second.fetch(graph, monotonic=INTERVAL)
    assert (held.sponsors, held.age_s, held.from_graph) == ((ADA,), INTERVAL, False)
    assert graph.reads == 2
    # The failed claimer's claim lapses after an interval: another replica then tries Graph.
    clock.advance(seconds=INTERVAL)
    graph.failing = False
    retried = await second.fetch(graph, monotonic=2 * INTERVAL)
    assert retried.from_graph and graph.reads == 3


async def test_a_record_of_another_agent_identity_is_never_taken_but_claimed_over(
    any_backend: MemoryBackend,
) -> None:
    stranger = SponsorRecord("another-identity", (Sponsor("mallory-id"),), T0)
    await any_backend.write_text(KEY, render_record(stranger))
    clock, graph = FakeClock(), CountingGraph()
    (replica,) = fleet(any_backend, clock, n=1)
    fetched = await replica.fetch(graph, monotonic=0.0)
    assert fetched.sponsors == (ADA,) and fetched.from_graph
    text, _ = await any_backend.read_text_with_etag(KEY)
    assert text is not None and parse_record(text, IDENTITY).sponsors == (ADA,)


async def test_an_unreadable_store_costs_a_graph_read_not_the_sponsors() -> None:
    class Unreadable:
        async def read_text_with_etag(self, key: str) -> tuple[str | None, str | None]:
            raise OSError("store down")

    clock, graph = FakeClock(), CountingGraph()
    replica = FleetSponsors(Unreadable(), "replica-0", IDENTITY, INTERVAL, clock=clock)  # type: ignore[arg-type]
    fetched = await replica.fetch(graph, monotonic=0.0)
    assert fetched.sponsors == (ADA,) and fetched.from_graph and graph.reads == 1


class HeldGraph(CountingGraph):
    """Graph's sponsor read that answers only once ``release`` is set (a holder mid-read)."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self) -> tuple[Sponsor, ...]:
        self.reading.set()
        await self.release.wait()
        return await super().__call__()


async def test_a_replica_with_no_list_waits_for_the_holders_read_instead_of_starting_empty(
    local_store: MemoryBackend,
) -> None:
    # A fresh fleet: the first replica has claimed the record and is reading Graph. The second holds
    # nothing to keep, so it watches the record and takes the holder's list when it lands.
    clock, graph = FakeClock(), HeldGraph()
    polls: list[float] = []

    async def holder_answers_while_we_poll(seconds: float) -> None:
        polls.append(seconds)
        graph.release.set()
        await asyncio.sleep(0.01)

    holder = FleetSponsors(local_store, "replica-0", IDENTITY, INTERVAL, clock=clock)
    joiner = FleetSponsors(
        local_store,
        "replica-1",
        IDENTITY,
        INTERVAL,
        clock=clock,
        pause=holder_answers_while_we_poll,
    )
    reading = asyncio.create_task(holder.fetch(graph, monotonic=0.0))
    await graph.reading.wait()
    joined = await joiner.fetch(graph, monotonic=0.0)
    graph.release.set()  # had the joiner not waited, the holder would answer only now
    assert (await reading).from_graph
    assert polls  # it waited on the record, not a whole retry with an empty gate
    assert (joined.sponsors, joined.from_graph, graph.reads) == ((ADA,), False, 1)


async def test_a_claim_over_no_list_whose_holder_went_quiet_is_taken_after_the_patience(
    local_store: MemoryBackend,
) -> None:
    # The holder claimed a fresh record and died (or hangs in Graph): nobody may wait an interval with
    # no sponsor at all. After CLAIM_PATIENCE_S of polling the record unchanged, the joiner reads Graph.
    clock, graph = FakeClock(), CountingGraph()
    abandoned = SponsorRecord(IDENTITY, claim=SponsorClaim("replica-0", clock()))
    await local_store.write_text(KEY, render_record(abandoned))

    async def time_passes(seconds: float) -> None:
        clock.advance(seconds=seconds)

    joiner = FleetSponsors(
        local_store, "replica-1", IDENTITY, INTERVAL, clock=clock, pause=time_passes
    )
    fetched = await joiner.fetch(graph, monotonic=0.0)
    assert (fetched.sponsors, fetched.from_graph, graph.reads) == ((ADA,), True, 1)
    assert clock() - T0 >= timedelta(seconds=CLAIM_PATIENCE_S)
    assert clock() - T0 < timedelta(seconds=INTERVAL)


def test_a_claim_over_no_list_lapses_after_the_patience_and_one_over_a_list_after_an_interval() -> (
    None
):
    watch = StampWatch()
    claim = SponsorClaim("other", T0)
    bare = SponsorRecord(IDENTITY, claim=claim)
    kept = SponsorRecord(IDENTITY, (ADA,), T0 - timedelta(seconds=INTERVAL), claim)
    soon = T0 + timedelta(seconds=CLAIM_PATIENCE_S)

    def step(record: SponsorRecord, now: datetime) -> Step:
        return decide(record, me="r", interval_s=INTERVAL, now=now, monotonic=0.0, watch=watch).step

    assert step(bare, T0) is Step.WAIT
    assert step(bare, soon) is Step.CLAIM  # nothing to keep meanwhile: not worth a whole interval
    assert step(kept, soon) is Step.WAIT  # the others keep the aging list while the holder reads
