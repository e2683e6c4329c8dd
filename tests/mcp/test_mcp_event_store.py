"""The per-session event history behind Last-Event-ID resumption."""

from __future__ import annotations

from mcp.server.streamable_http import GET_STREAM_KEY, EventMessage
from mcp_types import JSONRPCNotification

from service.mcp.event_store import InMemoryEventStore, SessionEventStore


def push(n: int) -> JSONRPCNotification:
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/claude/channel", params={"n": n})


async def replay(store: SessionEventStore, last_event_id: str) -> tuple[str | None, list[int]]:
    got: list[EventMessage] = []

    async def collect(event: EventMessage) -> None:
        got.append(event)

    stream = await store.replay_events_after(last_event_id, collect)
    return stream, [pushed_n(e) for e in got]


def pushed_n(event: EventMessage) -> int:
    message = event.message
    assert isinstance(message, JSONRPCNotification) and message.params is not None
    return message.params["n"]


async def test_replay_sends_only_the_later_events_of_the_same_stream_in_order() -> None:
    store = SessionEventStore()
    first = await store.store_event(GET_STREAM_KEY, push(1))
    await store.store_event("7", push(100))  # a POST stream's event is not part of the push stream
    await store.store_event(GET_STREAM_KEY, push(2))
    await store.store_event(GET_STREAM_KEY, push(3))
    assert await replay(store, first) == (GET_STREAM_KEY, [2, 3])


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


async def test_history_is_bounded_and_a_quiet_push_stream_stays_resumable() -> None:
    store = SessionEventStore(max_events=3)
    first = await store.store_event(GET_STREAM_KEY, push(1))
    for n in range(10):  # tool calls push the old push event out
        await store.store_event(str(n), push(100 + n))
    assert await replay(store, first) == (GET_STREAM_KEY, [])
    await store.store_event(GET_STREAM_KEY, push(2))
    assert await replay(store, first) == (GET_STREAM_KEY, [2])
    # Streams whose events are all gone are forgotten (the push stream aside).
    assert await replay(store, "1-3") == (None, [])


async def test_an_evicted_position_replays_everything_still_held_for_that_stream() -> None:
    store = SessionEventStore(max_events=2)
    first = await store.store_event(GET_STREAM_KEY, push(1))
    for n in (2, 3, 4):
        await store.store_event(GET_STREAM_KEY, push(n))
    assert await replay(store, first) == (GET_STREAM_KEY, [3, 4])


async def test_history_is_bounded_in_bytes_too_but_keeps_the_newest_event() -> None:
    big = JSONRPCNotification(jsonrpc="2.0", method="notifications/claude/channel", params={"n": 1, "pad": "x" * 500})
    store = SessionEventStore(max_events=100, max_bytes=1000)
    first = await store.store_event(GET_STREAM_KEY, push(0))
    await store.store_event(GET_STREAM_KEY, big)
    await store.store_event(GET_STREAM_KEY, big)  # over budget: the oldest go first
    assert await replay(store, first) == (GET_STREAM_KEY, [1])
    huge = JSONRPCNotification(jsonrpc="2.0", method="m", params={"n": 2, "pad": "x" * 5000})
    await store.store_event(GET_STREAM_KEY, huge)  # larger than the whole budget, still kept alone
    assert await replay(store, first) == (GET_STREAM_KEY, [2])


async def test_sessions_never_share_history_and_a_session_end_drops_it() -> None:
    stores = InMemoryEventStore()
    mine, theirs = stores.for_session("a"), stores.for_session("b")
    assert stores.for_session("a") is mine and mine is not theirs
    their_id = await theirs.store_event(GET_STREAM_KEY, push(1))
    await theirs.store_event(GET_STREAM_KEY, push(2))
    await mine.store_event(GET_STREAM_KEY, push(3))
    assert await replay(mine, their_id) == (GET_STREAM_KEY, [])  # same-looking id, own history only
    stores.forget("b")
    assert "b" not in stores and "a" in stores
