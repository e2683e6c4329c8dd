"""The hosts this replica serves, as an operator reads them in ``/readyz``.

One entry per MCP session whose host is still there (``SessionState.kind``): its id, its client's
name and version from the MCP initialize, push or tools, since when, its newest acknowledgement, and
what it is owed by age. Nothing here may identify a session or a message to a reader of the probe:
no token, no session id (the host's own name when it gave one, else the ``session_ref`` the logs
use), no message body.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from service.clock import format_timestamp
from service.mcp.sessions import SessionRegistry, SessionState
from service.telemetry.logging import session_ref

# The client's own strings, cut as the session log cuts them.
_NAME_SHOWN = 64
_VERSION_SHOWN = 32

OwedByAge = Callable[[str], dict[str, int]]


def hosts_view(sessions: SessionRegistry, owed_by_age: OwedByAge | None) -> dict[str, Any]:
    """``{"count", "by_kind", "away", "hosts": [...]}``, oldest host first."""
    states = sorted(sessions.sessions(), key=lambda s: s.created_at)
    present = [s for s in states if s.kind is not None]
    by_kind: dict[str, int] = {}
    for state in present:
        assert state.kind is not None
        by_kind[state.kind.value] = by_kind.get(state.kind.value, 0) + 1
    return {
        "count": len(present),
        "by_kind": by_kind,
        # Sessions whose host went away: the SDK keeps each until its idle timeout, in case it resumes.
        "away": len(states) - len(present),
        "hosts": [_host(s, owed_by_age) for s in present],
    }


def _host(state: SessionState, owed_by_age: OwedByAge | None) -> dict[str, Any]:
    assert state.kind is not None
    owed = (
        owed_by_age(state.host_id)
        if state.host_id is not None and owed_by_age is not None
        else None
    )
    return {
        "id": state.host_id if state.host_id is not None else session_ref(state.session_id),
        "client": {
            "name": state.client_name[:_NAME_SHOWN],
            "version": state.client_version[:_VERSION_SHOWN],
        },
        "kind": state.kind.value,
        "acknowledging": state.host_id is not None,
        "since": _time(state.created_at),
        "last_activity": _time(state.last_activity_at),
        "last_acknowledgement": _time(state.last_ack_at),
        # A host that does not acknowledge is owed nothing: what it is pushed counts as delivered.
        "owed_by_age": owed,
    }


def _time(at: datetime | None) -> str | None:
    return format_timestamp(at) if at is not None else None
