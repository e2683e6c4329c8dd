"""Shared change detection (SPEC §9): one elected scanner per fleet writes hints, readers read a chat
only when the fleet's cursor does not cover its hint, the sweep finds what a lost hint hid.

Replicas are worker stacks wired by the replica's own wiring on one store (LocalBackend, or a
FaultyBackend around it), the emulator over real HTTP; the tests drive the cycles themselves.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from settings_env import ROOMY_BUDGET
from worker_stack import RecordingTarget, WorkerStack, build_stack

from emulator.faults import FaultRule as GraphFault
from emulator.seed import Seed, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.domain.conversation import TEAMS_CHATS
from service.ledger.fleet.hints import PREFIX as HINTS_PREFIX
from service.ledger.fleet.hints import Hint, HintLog, parse_hint_line
from service.ledger.fleet.leases import LeaseRecord, lease_key, render_lease
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.storage.local import LocalBackend
from service.workers import chat_poll, chat_scan, chat_sweep

ROOMY = ROOMY_BUDGET


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=3, throttle=ROOMY)) as running:
        yield running


@pytest.fixture
def store(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "state")


@pytest.fixture
async def two(
    emulator: RunningEmulator, store: LocalBackend
) -> AsyncIterator[tuple[WorkerStack, WorkerStack]]:
    first = await build_stack(emulator, store, is_cloud=False)
    second = await build_stack(emulator, store, is_cloud=False, replica_id="second-replica")
    yield first, second
    await first.aclose()
    await second.aclose()


def requests(emulator: RunningEmulator, route: str) -> int:
    return sum(1 for r in emulator.stats.snapshot()["recent"] if r["route"] == route)


def chat_reads(stack: WorkerStack) -> float:
    return (
        stack.metrics.registry.get_sample_value(
            "entrabot_graph_requests_total", {"route": "chats/{id}/messages", "status": "200"}
        )
        or 0.0
    )


def scans(stack: WorkerStack) -> float:
    return sum(
        stack.metrics.registry.get_sample_value("entrabot_chat_scans_total", {"outcome": o}) or 0.0
        for o in ("ordered", "unordered")
    )


async def hints_in_store(store: LocalBackend) -> list[str]:
    lines: list[str] = []
    for key in await store.list(HINTS_PREFIX):
        lines.extend((await store.read_text(key) or "").splitlines())
    return [h.chat_id for line in lines if (h := parse_hint_line(line)) is not None]


async def held_elsewhere(store: LocalBackend, role: str) -> None:
    """``role``'s lease held, unexpired, by a replica that does nothing (hung, or partitioned away)."""
    now = datetime.now(UTC)
    await store.write_text(
        lease_key(role),
        render_lease(LeaseRecord(role, "hung-replica", 7, now + timedelta(hours=1), now)),
        if_absent=True,
    )


async def settle(*stacks: WorkerStack, cycles: int = 2) -> None:
    for _ in range(cycles):
        for stack in stacks:
            await stack.chats.cycle()


async def test_only_the_elected_scanner_scans_and_a_second_replica_adds_no_graph_load(
    two, emulator
) -> None:
    first, second = two
    first.hub.register(RecordingTarget())
    second.hub.register(RecordingTarget(target_id="second"))
    await settle(first, second)
    emulator.stats.reset()
    for _ in range(5):
        await settle(first, second, cycles=1)
    assert scans(first) > 0 and scans(second) == 0  # the lease holder alone
    assert requests(emulator, "/v1.0/chats/{id}/messages") == 0  # quiet chats cost no message read


async def test_the_replica_that_claims_spares_the_other_its_graph_read(
    two, emulator, store
) -> None:
    first, second = two
    first_host, second_host = RecordingTarget(), RecordingTarget(target_id="second")
    first.hub.register(first_host)
    second.hub.register(second_host)
    await settle(first, second)
    chat = emulator.seed.chats[0].id
    assert chat is not None
    posted = emulator.state.post_message(
        chat, sender_id=emulator.seed.humans[0].id, content="one read"
    )
    reads_before = chat_reads(first) + chat_reads(second)
    await settle(
        first, second, cycles=1
    )  # the scanner (first) hints; first reads and claims; second skips
    await settle(second, first, cycles=1)
    assert first_host.ids + second_host.ids == [posted.id]
    assert chat_reads(first) + chat_reads(second) == reads_before + 1
    assert (
        second.metrics.registry.get_sample_value(
            "entrabot_chat_hints_total", {"outcome": "covered"}
        )
        >= 1
    )


async def test_a_scanner_that_cannot_renew_its_lease_writes_no_more_hints(emulator, store) -> None:
    faulty = FaultyBackend(store)
    stack = await build_stack(emulator, faulty, is_cloud=False)
    try:
        stack.hub.register(RecordingTarget())
        await settle(stack)
        scanner = stack.chats.roles[0]
        assert isinstance(scanner, chat_scan.ChatScanner) and scanner.lease.held()
        faulty.add(FaultRule(Fault.WRITE_FAILS, key=lease_key(chat_scan.ROLE)))
        scanner.lease.renew_now()  # the renewal is due now, and it fails
        chat = emulator.seed.chats[2].id
        assert chat is not None
        emulator.state.post_message(
            chat, sender_id=emulator.seed.humans[0].id, content="after the loss"
        )
        hints_before = await hints_in_store(store)
        await stack.chats.cycle()
        assert not scanner.lease.held()
        assert await hints_in_store(store) == hints_before
    finally:
        await stack.aclose()


async def test_with_the_scanner_hung_the_sweep_alone_delivers_every_message(
    emulator, store
) -> None:
    await held_elsewhere(store, chat_scan.ROLE)
    stack = await build_stack(emulator, store, is_cloud=False)
    try:
        host = RecordingTarget()
        stack.hub.register(host)
        await settle(stack)  # first sights: the sweep's first rotation hints chats without a cursor
        chat = emulator.seed.chats[1].id
        assert chat is not None
        posted = [
            emulator.state.post_message(
                chat, sender_id=emulator.seed.humans[i % 2].id, content=f"m{i}"
            ).id
            for i in range(3)
        ]
        sweep = stack.chats.roles[1]
        assert isinstance(sweep, chat_sweep.ChatSweep)
        await stack.chats.cycle()
        assert host.ids == []  # no scanner: nothing hinted yet
        sweep._next_page = float("-inf")  # its next page is due
        await stack.chats.cycle()
        assert host.ids == posted  # delayed, never lost
    finally:
        await stack.aclose()


async def test_the_sweep_hints_a_message_in_flight_without_quickening_and_quickens_for_one_a_lost_hint_hid(
    emulator, store
) -> None:
    """Under steady traffic most sweep pages show a message the scanner's hint is still carrying to its
    claim: hinted (the sweep cannot know the scanner is alive), but not work found, so the sweep keeps
    its slow pace instead of listing chats and reading cursors every two seconds while people talk."""
    await held_elsewhere(store, chat_scan.ROLE)
    stack = await build_stack(emulator, store, is_cloud=False)
    try:
        host = RecordingTarget()
        stack.hub.register(host)
        await settle(stack)
        sweep = stack.chats.roles[1]
        assert isinstance(sweep, chat_sweep.ChatSweep)
        now = [1000.0]
        sweep.monotonic = lambda: now[0]
        chat = emulator.seed.chats[1].id
        assert chat is not None
        young = emulator.state.post_message(
            chat, sender_id=emulator.seed.humans[0].id, content="just now"
        )
        sweep._next_page = float("-inf")
        await stack.chats.cycle()
        assert host.ids == [young.id]
        assert sweep._next_page == now[0] + sweep.interval_s
        hidden = emulator.state.post_message(
            chat, sender_id=emulator.seed.humans[1].id, content="hint lost"
        )
        sweep.clock = lambda: datetime.now(UTC) + timedelta(seconds=chat_sweep.IN_FLIGHT_S + 5)
        now[0] += sweep.interval_s
        await stack.chats.cycle()
        assert host.ids == [young.id, hidden.id]
        assert sweep._next_page == now[0] + chat_sweep.BUSY_PAGE_S
    finally:
        await stack.aclose()


async def test_an_unordered_tenant_is_scanned_page_by_page_and_still_delivers_once(store) -> None:
    seed = build_seed(chats=3, throttle=ROOMY)
    refusing = Seed.model_validate({**seed.model_dump(), "chats_orderby": "refused"})
    with start_emulator(refusing) as emulator:
        stack = await build_stack(emulator, store, is_cloud=False)
        try:
            host = RecordingTarget()
            stack.hub.register(host)
            await settle(stack)
            chat = emulator.seed.chats[0].id
            assert chat is not None
            posted = emulator.state.post_message(
                chat, sender_id=emulator.seed.humans[0].id, content="hi"
            )
            await settle(stack, cycles=3)
            assert host.ids == [posted.id]
            assert (
                stack.metrics.registry.get_sample_value(
                    "entrabot_chat_scans_total", {"outcome": "ordering_refused"}
                )
                == 1
            )
        finally:
            await stack.aclose()


async def test_a_failed_scan_waits_for_the_next_scan_instead_of_reading_every_chat(
    two, emulator
) -> None:
    first, _ = two
    first.hub.register(RecordingTarget())
    await settle(first)
    emulator.context.faults.add(GraphFault(status=503, route_pattern=r"/me/chats$"))
    emulator.stats.reset()
    await settle(first, cycles=3)
    assert requests(emulator, "/v1.0/chats/{id}/messages") == 0


async def test_a_chat_too_old_to_surface_is_baselined_by_the_sweep_without_a_message_read(
    emulator, store
) -> None:
    chat = emulator.seed.chats[2].id
    assert chat is not None
    old = emulator.state.post_message(
        chat,
        sender_id=emulator.seed.humans[0].id,
        content="last week",
        created=datetime.now(UTC) - timedelta(days=7),
    )
    stack = await build_stack(emulator, store, is_cloud=False)
    try:
        stack.hub.register(RecordingTarget())
        emulator.stats.reset()
        await settle(stack)
        cursor = json.loads(await store.read_text(TEAMS_CHATS.cursor_key(chat)) or "{}")
        assert old.id in json.dumps(cursor)
        reads = [
            r
            for r in emulator.stats.snapshot()["recent"]
            if r["route"] == "/v1.0/chats/{id}/messages" and chat in r["path"]
        ]
        assert reads == []
    finally:
        await stack.aclose()


async def test_a_hint_taken_while_no_target_was_here_is_read_once_one_comes(two, emulator) -> None:
    first, second = two
    await settle(first, second)  # neither has a target: hints are taken and kept
    chat = emulator.seed.chats[0].id
    assert chat is not None
    posted = emulator.state.post_message(chat, sender_id=emulator.seed.humans[0].id, content="kept")
    await settle(first, second)
    host = RecordingTarget()
    second.hub.register(host)
    for _ in range(20):  # bounded: the read is due at once; the loop only absorbs scheduling
        await second.chats.cycle()
        if host.ids:
            break
        await asyncio.sleep(0.05)
    assert host.ids == [posted.id]


async def test_the_scan_relaxes_only_while_notifications_arrive_not_merely_while_subscribed(
    emulator, store
) -> None:
    stack = await build_stack(emulator, store, is_cloud=False)
    try:
        scanner = stack.chats.roles[0]
        assert isinstance(scanner, chat_scan.ChatScanner)

        async def subscribed() -> bool:
            return True

        scanner.notifications_flowing = subscribed
        scanner.cadence.relaxed_interval_s = 3600.0
        await settle(stack)
        before = scans(stack)
        await settle(stack, cycles=3)
        assert scans(stack) == before + 3  # subscribed, but nothing arrives: the scan stays tight
        chat = emulator.seed.chats[0].id
        assert chat is not None
        await stack.notify(chat)
        await settle(stack, cycles=2)  # the hint is taken; the next scan is the last for an hour
        relaxed_from = scans(stack)
        await settle(stack, cycles=3)
        assert scans(stack) == relaxed_from
    finally:
        await stack.aclose()


async def test_a_later_turn_waits_without_holding_up_the_replicas_other_chats(store) -> None:
    """A replica second in turn for one hinted chat still reads, in the same cycle, a chat where it is
    first; and when the first in turn never reads, it reads the chat itself after its turn and one
    more gap. A turn is waited through the want, never by sleeping in the cycle (that delayed every
    hint taken meanwhile)."""
    with start_emulator(build_seed(chats=8, throttle=ROOMY)) as emulator:
        first = await build_stack(emulator, store, is_cloud=False)
        second = await build_stack(emulator, store, is_cloud=False, replica_id="second-replica")
        try:
            now = [1000.0]
            hosts = [RecordingTarget(target_id="first"), RecordingTarget(target_id="second")]
            for stack, target in zip((first, second), hosts):
                stack.chats.monotonic = lambda: now[0]
                stack.chats.turns.spread_s = (
                    60.0  # the cycle below would time out if it slept a turn
                )
                stack.hub.register(target)
            await settle(
                first, second
            )  # both say they read; neither takes a turn before its settle
            now[0] += 5
            await settle(first, second)  # each lists both; first sights by turn
            now[0] += 130
            await settle(first, second)  # the later turns' first sights find the cursors written
            roster = second.chats.turns.readers
            assert roster is not None and roster.readers == {"test-replica", "second-replica"}
            chats = [c.id for c in emulator.seed.chats if c.id is not None]
            hinted_at = datetime.now(UTC)  # the turn order depends on the hinted message's time too
            ours, theirs = ([c for c in chats if roster.turn(c, hinted_at) == t] for t in (0, 1))
            assert ours and theirs, "the seed's chats all have one first reader; seed more chats"
            host = hosts[1]
            delivered_before = list(host.ids)
            humans = emulator.seed.humans[0].id
            waiting = emulator.state.post_message(
                theirs[0], sender_id=humans, content="the other replica's turn"
            )
            at_once = emulator.state.post_message(ours[0], sender_id=humans, content="our turn")
            await HintLog(second.backend).add(
                [
                    Hint(theirs[0], hinted_at, waiting.id, "notification"),
                    Hint(ours[0], hinted_at, at_once.id, "notification"),
                ]
            )
            reads_before = chat_reads(second)

            await asyncio.wait_for(second.chats.cycle(), timeout=30)
            assert host.ids[len(delivered_before) :] == [at_once.id]
            assert chat_reads(second) == reads_before + 1

            now[0] += 61  # our turn: the cursor read finds the chat uncovered, so one more gap
            await second.chats.cycle()
            assert host.ids[len(delivered_before) :] == [at_once.id]
            now[0] += 61
            await second.chats.cycle()
            assert host.ids[len(delivered_before) :] == [at_once.id, waiting.id]
            assert chat_reads(second) == reads_before + 2
        finally:
            await first.aclose()
            await second.aclose()


class OneUnreadableMessagePage(httpx.AsyncBaseTransport):
    """Real HTTP to the emulator; while ``armed``, the next chat-message page comes back with its first
    message unreadable (then it disarms)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.armed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if not self.armed or request.method != "GET" or not request.url.path.endswith("/messages"):
            return response
        body = json.loads(await response.aread())
        if not body.get("value"):
            return httpx.Response(
                response.status_code, headers={"content-type": "application/json"}, json=body
            )
        self.armed = False
        body["value"][0]["createdDateTime"] = {"not": "a time"}
        return httpx.Response(
            response.status_code, headers={"content-type": "application/json"}, json=body
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_a_chat_page_with_an_unreadable_message_is_read_again_without_a_new_hint(
    emulator, store
) -> None:
    """An unreadable message may be a person's: the read decides nothing, and the want stays, so the
    chat is read again shortly rather than when the next hint (or the sweep's rotation) comes by."""
    for role in ("chat_scanner", "chat_sweep"):
        await held_elsewhere(store, role)  # the one hint below is the only one
    wire = OneUnreadableMessagePage()
    stack = await build_stack(emulator, store, is_cloud=False, transport=wire)
    try:
        now = [1000.0]
        stack.chats.monotonic = lambda: now[0]
        host = RecordingTarget()
        stack.hub.register(host)
        await stack.discovery.cycle()  # the watched list, as a replica does before its loops
        await settle(stack)  # first sights
        chat = emulator.seed.chats[0].id
        assert chat is not None
        already = list(host.ids)
        posted = emulator.state.post_message(
            chat, sender_id=emulator.seed.humans[0].id, content="hidden once"
        )
        wire.armed = True
        await stack.notify(chat, posted.id)
        await settle(stack, cycles=1)
        assert not wire.armed and host.ids == already  # read once, unreadable: nothing decided
        now[0] += 3  # past the retry of a failed read
        await settle(stack, cycles=1)
        assert host.ids == [*already, posted.id]
    finally:
        await stack.aclose()


class CursorReadCounter(LocalBackend):
    """The store, counting reads of chat cursors."""

    cursor_reads = 0

    async def read_text_with_etag(self, key: str) -> tuple[str | None, str | None]:
        if key.startswith(TEAMS_CHATS.cursor_prefix):
            self.cursor_reads += 1
        return await super().read_text_with_etag(key)

    async def read_text(self, key: str) -> str | None:
        if key.startswith(TEAMS_CHATS.cursor_prefix):
            self.cursor_reads += 1
        return await super().read_text(key)


async def test_a_replica_joining_a_fleet_that_has_seen_every_chat_lists_the_cursors_instead_of_reading_each(
    tmp_path: Path,
) -> None:
    """A replica starting beside others: one listing tells it which chats had their first sight, so
    its start costs no cursor read per chat (60,000 reads for 6 replicas at 10,000 chats), and a chat
    it never read is still served when a hint names it."""
    with start_emulator(
        build_seed(chats=chat_poll.LIST_CURSORS_ABOVE + 5, throttle=ROOMY)
    ) as emulator:
        store = CursorReadCounter(tmp_path / "state")
        first = await build_stack(emulator, store, is_cloud=False)
        try:
            first.hub.register(RecordingTarget())
            await first.discovery.cycle()
            await settle(first)  # the first sight of every chat: their cursors exist
            chats = [c.id for c in emulator.seed.chats if c.id is not None]
            assert [c for c in chats if not await store.exists(TEAMS_CHATS.cursor_key(c))] == []
        finally:
            await first.aclose()
        joining = await build_stack(emulator, store, is_cloud=False, replica_id="joining-replica")
        try:
            host = RecordingTarget(target_id="joining")
            joining.hub.register(host)
            await joining.discovery.cycle()
            await joining.chats.hints.poll()  # the first replica's hints are old news here
            store.cursor_reads = 0
            await settle(joining)
            assert store.cursor_reads == 0  # not one per chat
            assert (
                joining.metrics.registry.get_sample_value("entrabot_chat_first_sights_pending") == 0
            )
            posted = emulator.state.post_message(
                chats[3], sender_id=emulator.seed.humans[0].id, content="later"
            )
            await joining.notify(chats[3], posted.id)
            await settle(joining)
            assert posted.id in host.ids
        finally:
            await joining.aclose()


async def test_a_hinted_message_costs_one_cursor_read_the_look_before_the_graph_read_serves_the_claim(
    emulator, tmp_path: Path
) -> None:
    """The claim writes against the cursor read that decided the chat needs a Graph read (SPEC §9's
    look), instead of reading the cursor a second time: one Blob read per message, not two."""
    store = CursorReadCounter(tmp_path / "state")
    stack = await build_stack(emulator, store, is_cloud=False)
    try:
        host = RecordingTarget()
        stack.hub.register(host)
        await settle(stack)
        chat = emulator.seed.chats[0].id
        assert chat is not None
        for role in (
            stack.chats.roles
        ):  # the scan and the sweep stand aside: only the hint below reads the chat
            role.cycle = _idle  # type: ignore[method-assign]
        for n in range(3):
            posted = emulator.state.post_message(
                chat, sender_id=emulator.seed.humans[0].id, content=f"look {n}"
            )
            await stack.notify(chat, posted.id)
            store.cursor_reads = 0
            await settle(stack, cycles=1)
            assert host.ids[-1] == posted.id
            assert store.cursor_reads == 1
    finally:
        await stack.aclose()


async def _idle() -> None:
    return None


def _scanner_on_a_clock(
    stack: WorkerStack, now: list[float], *, quiet_s: float, active_s: float
) -> chat_scan.ChatScanner:
    scanner = stack.chats.roles[0]
    assert isinstance(scanner, chat_scan.ChatScanner)
    scanner.cadence.interval_s, scanner.cadence.active_interval_s = quiet_s, active_s
    scanner.monotonic = lambda: now[0]
    return scanner


async def scans_at(
    stack: WorkerStack, scanner: chat_scan.ChatScanner, now: list[float], times: list[float]
) -> list[float]:
    """The times among ``times`` at which a scanner cycle scanned."""
    scanned: list[float] = []
    for t in times:
        now[0] = t
        before = scans(stack)
        await scanner.cycle()
        if scans(stack) > before:
            scanned.append(t)
    return scanned


async def test_the_scan_quickens_while_it_finds_new_messages_and_slows_when_the_tenant_is_quiet(
    emulator, store
) -> None:
    stack = await build_stack(emulator, store, is_cloud=False)
    try:
        now = [0.0]
        scanner = _scanner_on_a_clock(stack, now, quiet_s=3.0, active_s=1.0)
        await scans_at(
            stack, scanner, now, [0.0]
        )  # the tenure's first scan (may hint the seed's chats)
        later = chat_scan.ACTIVE_FOR_S + 10
        assert await scans_at(stack, scanner, now, [later + d for d in (0, 1, 2, 3, 4, 5, 6)]) == [
            later,
            later + 3,
            later + 6,
        ]
        chat = emulator.seed.chats[1].id
        assert chat is not None
        emulator.state.post_message(chat, sender_id=emulator.seed.humans[0].id, content="wake up")
        t = later + 9  # this scan finds the message: active from here
        assert await scans_at(stack, scanner, now, [t, t + 0.5, t + 1, t + 2, t + 2.5, t + 3]) == [
            t,
            t + 1,
            t + 2,
            t + 3,
        ]
        # Nothing new since t: quiet again ACTIVE_FOR_S after it.
        q = t + chat_scan.ACTIVE_FOR_S + 0.5
        assert await scans_at(stack, scanner, now, [q, q + 1, q + 2, q + 3]) == [q, q + 3]
    finally:
        await stack.aclose()


async def test_an_active_scan_that_reads_several_pages_waits_one_active_interval_per_page(
    store,
) -> None:
    """A burst of new messages over more than one page of chats: the scanner stays at about one page
    per active interval, not one scan per active interval (list chats allows 5 req/s per user, shared
    with discovery, the sweep and the tools)."""
    with start_emulator(build_seed(chats=60, throttle=ROOMY)) as emulator:
        stack = await build_stack(emulator, store, is_cloud=False)
        try:
            now = [0.0]
            scanner = _scanner_on_a_clock(stack, now, quiet_s=10.0, active_s=1.0)
            await scans_at(
                stack, scanner, now, [0.0, 100.0]
            )  # the tenure's look-back, then a quiet scan
            for spec in emulator.seed.chats[:55]:
                assert spec.id is not None
                emulator.state.post_message(
                    spec.id, sender_id=emulator.seed.humans[0].id, content="burst"
                )
            emulator.stats.reset()
            t = 200.0
            assert await scans_at(stack, scanner, now, [t, t + 1, t + 2]) == [
                t,
                t + 2,
            ]  # 2 pages: 2 s
            # Two scans of two pages each (the emulator's 5 list-chats requests a second per user may
            # answer one of them 429 first: four back to back here).
            assert (
                sum(
                    1
                    for r in emulator.stats.snapshot()["recent"]
                    if r["route"] == "/v1.0/me/chats" and r["status"] == 200
                )
                == 4
            )
        finally:
            await stack.aclose()
