"""Each MCP session's event history, and the session's push stream served from it.

Hand-written because the SDK ships only the ``EventStore`` interface, no implementation. History is
kept per session: the SDK names a session's streams by JSON-RPC request id and gives every session's
GET stream the same key, so one history shared by all sessions would replay one host's pushes to
another. ``sdk_adapter.PerSessionEventStoreManager`` hands each session its own ``SessionEventStore``.

**The push stream is served from here, whole.** What this relies on in mcp 2.3.0
(``mcp/server/streamable_http.py``; ``tests/mcp/test_sdk_adapter.py`` pins each point):

- ``connect()``'s ``message_router`` stores every message the session sends in the event store
  (``store_event``) before it routes it, and forwards it live only to a stream attached in
  ``_request_streams``: a message for a stream not attached is stored and nothing else.
- ``_handle_get_request`` answers a GET with ``Last-Event-ID`` through ``_replay_events``, whose
  ``replay_sender`` calls ``replay_events_after(last_event_id, send_event)`` with a callback writing
  to that response's SSE stream, and afterwards attaches a live stream of its own only when the call
  returned a stream id not attached yet (after minting a priming event).
- That replay → attach hand-off has a window the SDK's comment calls "pre-existing and tracked
  separately": a push stored after the history was copied for the replay and before the live stream
  is attached is in the history behind the host's next position and never sent (issue 22).

So for the push stream (``GET_STREAM_KEY``) ``replay_events_after`` does not return after the
replay: it goes on sending each event as it is stored, until the connection ends, a newer connection
of the session takes the stream over, or the session ends; then it returns None, so the SDK never
attaches a push stream of its own and this loop is the stream's only writer. ``sdk_adapter``'s
``PushStreamFromHistory`` turns a GET without ``Last-Event-ID`` into a resume from
``PUSH_STREAM_CURSOR``, so every push connection is served this way. Request streams (a POST's
answer) keep the SDK's replay and attach.

A push event stays in the history until a connection has taken it (the SSE writer accepted it);
only taken events and request-stream events are evicted, oldest first, past the bounds. Unsent pushes
are bounded by the push target, which stops taking pushes for a session whose backlog is full or
has waited longer than its send timeout (``push_target.PushTarget.is_alive``).

Sessions are pinned to the replica that created them, so nothing here needs to be shared.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp_types import JSONRPCMessage

from service.telemetry.logging import session_ref

log = logging.getLogger(__name__)

DEFAULT_MAX_EVENTS_PER_SESSION = 256
# Tool results (a page of chat messages) can be large; the count alone would not bound memory.
DEFAULT_MAX_BYTES_PER_SESSION = 2 * 1024 * 1024
PUSH_STREAM_CURSOR = "push-stream"
"""The position a push connection without ``Last-Event-ID`` starts from: after the newest push an
earlier connection of the session took, so what none took goes out on this one."""


@dataclass(frozen=True, slots=True)
class _Event:
    stream_no: int
    seq: int
    message: (
        JSONRPCMessage | None
    )  # None marks the SDK's priming event: it has an id but is never replayed
    size: int
    stored_at: float


class SessionEventStore(EventStore):
    """One session's events, and the serving of its push stream.

    Event ids are ``"<stream number>-<sequence>"``: the stream number tells which stream a reconnect
    resumes even after that event itself was evicted, and the sequence orders events in the session.
    The push stream is stream 0. The newest event is always kept, however large, so the stream it
    belongs to stays resumable.
    """

    def __init__(
        self,
        max_events: int = DEFAULT_MAX_EVENTS_PER_SESSION,
        max_bytes: int = DEFAULT_MAX_BYTES_PER_SESSION,
        *,
        clock: Callable[[], float] = time.monotonic,
        session: str = "-",
    ) -> None:
        self._bounds = _Bounds(max_events, max_bytes)
        self._events: deque[_Event] = deque()
        self._clock = clock
        self._session = session  # its name in logs (session_ref)
        self._bytes = 0
        self._seq = 0
        self._streams = _StreamNumbers()
        self._push_no = self._streams.number_of(GET_STREAM_KEY)
        self._taken = 0  # the newest push a connection took; later pushes are unsent
        self._unsent = 0
        self._unsent_bytes = 0
        self._evicted_push = 0  # the newest push evicted: a host resuming before it missed some
        self._connection = 0  # which push connection serves the stream (the newest)
        self._changed = asyncio.Event()
        self._closed = False

    # --- the SDK's EventStore ---

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        stream_no = self._streams.number_of(stream_id)
        self._seq += 1
        size = (
            len(message.model_dump_json(by_alias=True, exclude_unset=True))
            if message is not None
            else 0
        )
        event = _Event(stream_no, self._seq, message, size, self._clock())
        self._events.append(event)
        self._bytes += size
        self._streams.hold(stream_no)
        if self._unsent_push(event):
            self._unsent += 1
            self._unsent_bytes += size
            self._wake()
        self._evict_past_bounds()
        return _event_id(event)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        if last_event_id == PUSH_STREAM_CURSOR:
            await self._serve_push_stream(self._taken, send_callback)
            return None
        parsed = _parse_event_id(last_event_id)
        if parsed is None:
            return None
        stream_no, seq = parsed
        stream_id = self._streams.id_of(stream_no)
        if stream_id is None or seq > self._seq:
            return None  # not an id this session ever handed out, or its stream is entirely gone
        if stream_no == self._push_no:
            await self._serve_push_stream(seq, send_callback)
            return None  # the SDK must not attach a push stream of its own (module docstring)
        # A copy: the callback awaits, and new events may arrive for this session meanwhile.
        for event in list(self._events):
            if event.stream_no == stream_no and event.seq > seq and event.message is not None:
                await send_callback(EventMessage(event.message, _event_id(event)))
        return stream_id

    # No __len__: the SDK tests a store's truthiness to decide whether one is configured at all.

    # --- the push stream ---

    def backlog_full(self) -> bool:
        """Whether the pushes no connection took yet fill the bounds: the host takes no more now."""
        return self._bounds.reached(self._unsent, self._unsent_bytes)

    def backlog_age_s(self) -> float | None:
        """How long the oldest push no connection took has waited (None: there is none)."""
        if not self._unsent:
            return None
        oldest = next(e for e in self._events if self._unsent_push(e))
        return self._clock() - oldest.stored_at

    def close(self) -> None:
        """The session ended: its push connection ends, and the history is dropped with the store."""
        self._closed = True
        self._wake()

    async def _serve_push_stream(self, after: int, send: EventCallback) -> None:
        self._connection += 1
        connection = self._connection
        self._wake()  # the connection serving the stream so far stops: the host reads the newest one
        if after < self._evicted_push:
            log.warning(
                "a push connection resumes from before evicted pushes; the host may have missed some",
                extra={
                    "session": self._session,
                    "after": after,
                    "evicted_through": self._evicted_push,
                },
            )
        position = after
        while not self._closed and connection == self._connection:
            found = self._next_push(position)
            if found is None:
                await self._changed.wait()
                continue
            event, message = found
            await send(EventMessage(message, _event_id(event)))
            position = event.seq
            if event.seq > self._taken:
                self._mark_taken(event.seq)

    def _next_push(self, after: int) -> tuple[_Event, JSONRPCMessage] | None:
        for event in self._events:
            if event.stream_no == self._push_no and event.seq > after and event.message is not None:
                return event, event.message
        return None

    def _mark_taken(self, seq: int) -> None:
        for event in self._events:
            if self._unsent_push(event) and event.seq <= seq:
                self._unsent -= 1
                self._unsent_bytes -= event.size
        self._taken = seq
        self._evict_past_bounds()

    def _unsent_push(self, event: _Event) -> bool:
        return (
            event.stream_no == self._push_no
            and event.message is not None
            and event.seq > self._taken
        )

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # --- bounds ---

    def _evict_past_bounds(self) -> None:
        while self._bounds.exceeded(
            len(self._events) - self._unsent, self._bytes - self._unsent_bytes
        ):
            index = self._oldest_evictable()
            if index is None:
                return
            self._evict(index)

    def _oldest_evictable(self) -> int | None:
        newest = len(self._events) - 1
        return next(
            (i for i, e in enumerate(self._events) if i < newest and not self._unsent_push(e)), None
        )

    def _evict(self, index: int) -> None:
        event = self._events[index]
        del self._events[index]
        self._bytes -= event.size
        if event.stream_no == self._push_no and event.message is not None:
            self._evicted_push = max(self._evicted_push, event.seq)
        # The push stream stays resumable however long it was quiet.
        self._streams.release(event.stream_no, forget=event.stream_no != self._push_no)


@dataclass(frozen=True, slots=True)
class _Bounds:
    """How many events, and how many bytes of them, a session's history holds past its unsent pushes."""

    max_events: int
    max_bytes: int

    def __post_init__(self) -> None:
        if self.max_events <= 0 or self.max_bytes <= 0:
            raise ValueError("max_events and max_bytes must be positive")

    def reached(self, events: int, size: int) -> bool:
        return events >= self.max_events or size >= self.max_bytes

    def exceeded(self, events: int, size: int) -> bool:
        return events > self.max_events or size > self.max_bytes


class _StreamNumbers:
    """The number of each of a session's streams (the first part of its event ids), and how many of
    each stream's events the history still holds."""

    def __init__(self) -> None:
        self._next = 0  # never reused, so an old id cannot resume a different stream
        self._number: dict[StreamId, int] = {}
        self._id: dict[int, StreamId] = {}
        self._held: dict[int, int] = {}  # stream number -> events of that stream still held

    def number_of(self, stream_id: StreamId) -> int:
        stream_no = self._number.get(stream_id)
        if stream_no is None:
            stream_no = self._next
            self._next += 1
            self._number[stream_id] = stream_no
            self._id[stream_no] = stream_id
        return stream_no

    def id_of(self, stream_no: int) -> StreamId | None:
        return self._id.get(stream_no)

    def hold(self, stream_no: int) -> None:
        self._held[stream_no] = self._held.get(stream_no, 0) + 1

    def release(self, stream_no: int, *, forget: bool) -> None:
        """One of the stream's events left the history; with ``forget``, the stream's number goes
        with its last event (its ids then resume nothing)."""
        left = self._held[stream_no] - 1
        if left:
            self._held[stream_no] = left
            return
        del self._held[stream_no]
        if forget:
            del self._number[self._id.pop(stream_no)]


class InMemoryEventStore:
    """The per-session stores of one replica; a session's history goes when the session ends."""

    def __init__(
        self,
        max_events_per_session: int = DEFAULT_MAX_EVENTS_PER_SESSION,
        max_bytes_per_session: int = DEFAULT_MAX_BYTES_PER_SESSION,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_events = max_events_per_session
        self._max_bytes = max_bytes_per_session
        self._clock = clock
        self._sessions: dict[str, SessionEventStore] = {}

    def for_session(self, session_id: str) -> SessionEventStore:
        store = self._sessions.get(session_id)
        if store is None:
            store = SessionEventStore(
                self._max_events,
                self._max_bytes,
                clock=self._clock,
                session=session_ref(session_id),
            )
            self._sessions[session_id] = store
        return store

    def forget(self, session_id: str) -> None:
        store = self._sessions.pop(session_id, None)
        if store is not None:
            store.close()

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions


def _event_id(event: _Event) -> str:
    return f"{event.stream_no}-{event.seq}"


def _parse_event_id(event_id: str) -> tuple[int, int] | None:
    stream, sep, seq = event_id.partition("-")
    if not sep or not stream.isdigit() or not seq.isdigit():
        return None
    return int(stream), int(seq)
