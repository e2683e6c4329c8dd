"""In-memory, bounded event history per MCP session, so a host that reconnects its push stream with
``Last-Event-ID`` receives the pushes it missed on this replica.

Hand-written because the SDK ships only the ``EventStore`` interface, no implementation. History is
kept per session: the SDK names a session's streams by JSON-RPC request id and gives every session's
GET stream the same key, so one history shared by all sessions would replay one host's pushes to
another. ``sdk_adapter.PerSessionEventStoreManager`` hands each session its own ``SessionEventStore``.

Sessions are pinned to the replica that created them, so nothing here needs to be shared.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from mcp.server.streamable_http import GET_STREAM_KEY, EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

DEFAULT_MAX_EVENTS_PER_SESSION = 256
# Tool results (a page of chat messages) can be large; the count alone would not bound memory.
DEFAULT_MAX_BYTES_PER_SESSION = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Event:
    stream_no: int
    seq: int
    message: JSONRPCMessage | None  # None marks the SDK's priming event: it has an id but is never replayed
    size: int


class SessionEventStore(EventStore):
    """One session's events, oldest evicted first beyond ``max_events`` or ``max_bytes`` (of JSON).

    The newest event is always kept, however large, so the stream it belongs to stays resumable.

    Event ids are ``"<stream number>-<sequence>"``: the stream number tells which stream a reconnect
    resumes even after that event itself was evicted, and the sequence orders events in the session.
    """

    def __init__(
        self, max_events: int = DEFAULT_MAX_EVENTS_PER_SESSION, max_bytes: int = DEFAULT_MAX_BYTES_PER_SESSION
    ) -> None:
        if max_events <= 0 or max_bytes <= 0:
            raise ValueError("max_events and max_bytes must be positive")
        self._events: deque[_Event] = deque()
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._bytes = 0
        self._seq = 0
        self._next_stream_no = 0  # never reused, so an old id cannot resume a different stream
        self._stream_no: dict[StreamId, int] = {}
        self._stream_id: dict[int, StreamId] = {}
        self._held: dict[int, int] = {}  # stream number -> events of that stream still held

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        stream_no = self._stream_no.get(stream_id)
        if stream_no is None:
            stream_no = self._next_stream_no
            self._next_stream_no += 1
            self._stream_no[stream_id] = stream_no
            self._stream_id[stream_no] = stream_id
        self._seq += 1
        size = len(message.model_dump_json(by_alias=True, exclude_unset=True)) if message is not None else 0
        self._events.append(_Event(stream_no, self._seq, message, size))
        self._bytes += size
        self._held[stream_no] = self._held.get(stream_no, 0) + 1
        while len(self._events) > 1 and (len(self._events) > self._max_events or self._bytes > self._max_bytes):
            self._evict_oldest()
        return f"{stream_no}-{self._seq}"

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        parsed = _parse_event_id(last_event_id)
        if parsed is None:
            return None
        stream_no, seq = parsed
        stream_id = self._stream_id.get(stream_no)
        if stream_id is None or seq > self._seq:
            return None  # not an id this session ever handed out, or its stream is entirely gone
        # A copy: the callback awaits, and new events may arrive for this session meanwhile.
        for event in list(self._events):
            if event.stream_no == stream_no and event.seq > seq and event.message is not None:
                await send_callback(EventMessage(event.message, f"{stream_no}-{event.seq}"))
        return stream_id

    # No __len__: the SDK tests a store's truthiness to decide whether one is configured at all.

    def _evict_oldest(self) -> None:
        event = self._events.popleft()
        self._bytes -= event.size
        left = self._held[event.stream_no] - 1
        if left:
            self._held[event.stream_no] = left
            return
        del self._held[event.stream_no]
        stream_id = self._stream_id[event.stream_no]
        if stream_id != GET_STREAM_KEY:  # the push stream stays resumable however long it was quiet
            del self._stream_id[event.stream_no]
            del self._stream_no[stream_id]


class InMemoryEventStore:
    """The per-session stores of one replica; a session's history goes when the session ends."""

    def __init__(
        self,
        max_events_per_session: int = DEFAULT_MAX_EVENTS_PER_SESSION,
        max_bytes_per_session: int = DEFAULT_MAX_BYTES_PER_SESSION,
    ) -> None:
        self._max_events = max_events_per_session
        self._max_bytes = max_bytes_per_session
        self._sessions: dict[str, SessionEventStore] = {}

    def for_session(self, session_id: str) -> SessionEventStore:
        store = self._sessions.get(session_id)
        if store is None:
            store = self._sessions[session_id] = SessionEventStore(self._max_events, self._max_bytes)
        return store

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions


def _parse_event_id(event_id: str) -> tuple[int, int] | None:
    stream, sep, seq = event_id.partition("-")
    if not sep or not stream.isdigit() or not seq.isdigit():
        return None
    return int(stream), int(seq)
