"""The per-session event history, and the push stream served from it (Last-Event-ID resumption)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server.streamable_http import GET_STREAM_KEY, EventMessage
from mcp_types import JSONRPCNotification

from service.mcp.event_store import PUSH_STREAM_CURSOR, InMemoryEventStore, SessionEventStore
from tests.mcp.server_fixture import eventually


def push(n: int, pad: str = "") -> JSONRPCNotification:
    params: dict[str, object] = {"n": n, "pad": pad} if pad else {"n": n}
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/claude/channel", params=params)


def numbers(events: list[EventMessage]) -> list[int]:
    return [pushed_n(e) for e in events]


def pushed_n(event: EventMessage) -> int:
    message = event.message
    assert isinstance(message, JSONRPCNotification) and message.params is not None
    return int(message.params["n"])


async def replay(store: SessionEventStore, last_event_id: str) -> tuple[str | None, list[int]]:
    """A replay that returns by itself: a request stream's, or a position the store refuses."""
    got: list[EventMessage] = []

    async def collect(event: EventMessage) -> None:
        got.append(event)

    stream = await store.replay_events_after(last_event_id, collect)
    return stream, numbers(got)


class Connection:
    """A push connection being served: what it was sent, and what the serving returned."""

    def __init__(self) -> None:
        self.sent: list[EventMessage] = []
        self.ended: list[str | None] = []

    async def receive(self, event: EventMessage) -> None:
        self.sent.append(event)

    def numbers(self) -> list[int]:
        return numbers(self.sent)


@asynccontextmanager
async def connected(store: SessionEventStore, *positions: str) -> AsyncIterator[list[Connection]]:
    """One push connection per position, opened in order; cancelled (the host hung up) at the end."""
    connections = [Connection() for _ in positions]
    async with anyio.create_task_group() as tg:
        for connection, position in zip(connections, positions, strict=True):

            async def serve(connection: Connection = connection, position: str = position) -> None:
                connection.ended.append(
                    await store.replay_events_after(position, connection.receive)
                )

            tg.start_soon(serve)
            await anyio.wait_all_tasks_blocked()
        yield connections
        tg.cancel_scope.cancel()


async def test_a_push_connection_sends_the_later_pushes_then_each_new_one_as_it_is_stored() -> None:
    store = SessionEventStore()
    first = await store.store_event(GET_STREAM_KEY, push(1))
    await store.store_event("7", push(100))  # a POST stream's event is not part of the push stream
    await store.store_event(GET_STREAM_KEY, push(2))
    async with connected(store, first) as [host]:
        await eventually(lambda: host.numbers() == [2], "the replay")
        await store.store_event(GET_STREAM_KEY, push(3))
        await eventually(lambda: host.numbers() == [2, 3], "the live push")
        assert [e.event_id for e in host.sent] == ["0-3", "0-4"]


async def test_a_push_stored_while_the_replay_is_being_sent_goes_out_after_it() -> None:
    # The unit form of issue 22's loss: a push arriving mid-replay is neither skipped nor sent twice.
    store = SessionEventStore()
    first = await store.store_event(GET_STREAM_KEY, push(1))
    await store.store_event(GET_STREAM_KEY, push(2))
    await store.store_event(GET_STREAM_KEY, push(3))
    host = Connection()

    async def receive_and_push_meanwhile(event: EventMessage) -> None:
        if not host.sent:
            await store.store_event(GET_STREAM_KEY, push(4))
        await host.receive(event)

    async with anyio.create_task_group() as tg:
        tg.start_soon(store.replay_events_after, first, receive_and_push_meanwhile)
        await eventually(lambda: len(host.sent) == 3, "the replay and the push made during it")
        tg.cancel_scope.cancel()
    assert host.numbers() == [2, 3, 4]


async def test_the_push_connection_ends_with_the_session_and_the_sdk_attaches_nothing() -> None:
    stores = InMemoryEventStore()
    store = stores.for_session("s")
    first = await store.store_event(GET_STREAM_KEY, push(1))
    async with connected(store, first) as [host]:
        stores.forget("s")
        await eventually(lambda: host.ended, "the connection to end")
        assert host.ended == [None]  # None: the SDK attaches no live stream of its own after it


async def test_a_newer_push_connection_takes_the_stream_over() -> None:
    store = SessionEventStore()
    first = await store.store_event(GET_STREAM_KEY, push(1))
    async with connected(store, first, first) as [older, newer]:
        await eventually(lambda: older.ended, "the older connection to end")
        assert older.ended == [None]
        await store.store_event(GET_STREAM_KEY, push(2))
        await eventually(lambda: newer.numbers() == [2], "the push on the newer connection")
        assert older.sent == []


async def test_a_connection_without_a_position_gets_what_no_earlier_connection_took() -> None:
    store = SessionEventStore()
    async with connected(store, PUSH_STREAM_CURSOR) as [host]:
        await store.store_event(GET_STREAM_KEY, push(1))
        await eventually(lambda: host.numbers() == [1], "the first push")
    await store.store_event(GET_STREAM_KEY, push(2))  # while no connection is open
    async with connected(store, PUSH_STREAM_CURSOR) as [host]:
        await eventually(lambda: host.numbers() == [2], "the push no connection took")


async def test_a_request_stream_replay_returns_its_stream_for_the_sdk_to_attach() -> None:
    store = SessionEventStore()
    first = await store.store_event("7", push(1))
    await store.store_event(GET_STREAM_KEY, push(100))
    await store.store_event("7", push(2))
    assert await replay(store, first) == ("7", [2])


async def test_priming_events_have_ids_but_are_never_replayed() -> None:
    store = SessionEventStore()
    priming = await store.store_event("3", None)
    await store.store_event("3", push(1))
    assert await replay(store, priming) == ("3", [1])


async def test_ids_this_session_never_issued_resume_nothing() -> None:
    store = SessionEventStore()
    await store.store_event(GET_STREAM_KEY, push(1))
    for foreign in ("garbage", "9-1", "0-99", "", "-", "0-"):
        assert await replay(store, foreign) == (None, [])


async def test_pushes_no_connection_took_are_never_evicted_and_do_not_count_against_the_bounds() -> (
    None
):
    store = SessionEventStore(max_events=2)
    first = await store.store_event(GET_STREAM_KEY, push(1))
    for n in (2, 3, 4):
        await store.store_event(GET_STREAM_KEY, push(n))
    for n in range(5):  # tool calls' answers still fit the bounds beside them
        await store.store_event(str(n), push(100 + n))
    async with connected(store, first) as [host]:
        await eventually(lambda: host.numbers() == [2, 3, 4], "every push the host missed")


async def test_taken_pushes_and_answers_are_evicted_oldest_first_past_the_bounds() -> None:
    store = SessionEventStore(max_events=2)
    first = await store.store_event(GET_STREAM_KEY, push(1))
    async with connected(store, PUSH_STREAM_CURSOR) as [host]:
        for n in (2, 3, 4):
            await store.store_event(GET_STREAM_KEY, push(n))
        await eventually(lambda: host.numbers() == [1, 2, 3, 4], "the pushes")
    async with connected(store, first) as [resumed]:  # from before what is gone: what is still held
        await eventually(lambda: resumed.numbers() == [3, 4], "the pushes still held")


async def test_a_quiet_push_stream_stays_resumable_and_emptied_request_streams_are_forgotten() -> (
    None
):
    store = SessionEventStore(max_events=3)
    first = await store.store_event(GET_STREAM_KEY, push(1))
    async with connected(store, PUSH_STREAM_CURSOR) as [host]:
        await eventually(lambda: host.numbers() == [1], "the push")
    answer = await store.store_event("a", push(100))
    for n in range(10):  # tool calls push the old push event out
        await store.store_event(str(n), push(200 + n))
    await store.store_event(GET_STREAM_KEY, push(2))
    async with connected(store, first) as [resumed]:
        await eventually(lambda: resumed.numbers() == [2], "the later push")
    assert await replay(store, answer) == (None, [])


async def test_history_is_bounded_in_bytes_too_but_keeps_the_newest_event() -> None:
    store = SessionEventStore(max_events=100, max_bytes=1000)
    first = await store.store_event("a", push(0))
    await store.store_event("a", push(1, pad="x" * 500))
    await store.store_event("a", push(2, pad="x" * 500))  # over budget: the oldest go first
    assert await replay(store, first) == ("a", [2])
    await store.store_event(
        "a", push(3, pad="x" * 5000)
    )  # larger than the whole budget, still kept alone
    assert await replay(store, first) == ("a", [3])


async def test_the_backlog_says_how_long_the_oldest_untaken_push_waited_and_whether_it_is_full() -> (
    None
):
    now = [100.0]
    store = SessionEventStore(max_events=2, clock=lambda: now[0])
    assert (store.backlog_age_s(), store.backlog_full()) == (None, False)
    await store.store_event(GET_STREAM_KEY, push(1))
    now[0] += 4
    await store.store_event(GET_STREAM_KEY, push(2))
    await store.store_event("7", push(100))  # answers are not the push stream's backlog
    now[0] += 3
    assert (store.backlog_age_s(), store.backlog_full()) == (7.0, True)
    async with connected(store, PUSH_STREAM_CURSOR) as [host]:
        await eventually(lambda: host.numbers() == [1, 2], "the backlog to drain")
        assert (store.backlog_age_s(), store.backlog_full()) == (None, False)


async def test_sessions_never_share_history_and_a_session_end_drops_it() -> None:
    stores = InMemoryEventStore()
    mine, theirs = stores.for_session("a"), stores.for_session("b")
    assert stores.for_session("a") is mine and mine is not theirs
    their_id = await theirs.store_event("7", push(1))
    await theirs.store_event("7", push(2))
    await mine.store_event("7", push(3))
    assert await replay(mine, their_id) == ("7", [])  # same-looking id, own history only
    stores.forget("b")
    assert "b" not in stores and "a" in stores
