"""Session lifetimes over raw HTTP: push streams opening and closing, resumption, expiry, 404s."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.delivery.hub import DispatchOutcome
from tests.mcp.server_fixture import (
    PUSH_METHOD,
    LiveMcp,
    chat_message,
    eventually,
    live_mcp,
    mcp_settings,
    modern_request,
    open_raw_session,
    session_headers,
    sse_events,
)


def gauge(live: LiveMcp, name: str) -> float | None:
    return live.metrics.registry.get_sample_value(name)


async def test_reconnecting_with_last_event_id_replays_the_pushes_the_host_missed(
    live: LiveMcp, http: httpx.AsyncClient
) -> None:
    session_id = await open_raw_session(http, live.url)
    get_headers = {**session_headers(session_id), "Accept": "text/event-stream"}

    async with http.stream("GET", live.url, headers=get_headers) as stream:
        assert stream.status_code == 200
        await eventually(live.push_targets, "the push stream")
        events = sse_events(stream)
        [first] = await live.hub.dispatch([chat_message("m-1")])
        assert first.outcome is DispatchOutcome.DELIVERED
        seen = await anext(events)
        assert (
            seen.data["method"] == PUSH_METHOD
            and seen.data["params"]["meta"]["message_id"] == "m-1"
        )
        assert seen.id
        # Two more go out while the host has stopped reading; it then drops the connection unread.
        later = await live.hub.dispatch([chat_message("m-2"), chat_message("m-3")])
        assert [d.outcome for d in later] == [DispatchOutcome.DELIVERED] * 2
    await eventually(
        lambda: not live.push_targets(), "the dropped stream to stop being a push target"
    )

    async with http.stream(
        "GET", live.url, headers={**get_headers, "Last-Event-ID": seen.id}
    ) as resumed:
        assert resumed.status_code == 200
        events = sse_events(resumed)
        replayed = [await anext(events), await anext(events)]
        assert [e.data["params"]["meta"]["message_id"] for e in replayed] == ["m-2", "m-3"]
        # The resumed stream is the session's push stream again: new pushes follow the replay.
        await eventually(live.push_targets, "the resumed stream to be a push target again")
        [fourth] = await live.hub.dispatch([chat_message("m-4")])
        assert fourth.outcome is DispatchOutcome.DELIVERED
        assert (await anext(events)).data["params"]["meta"]["message_id"] == "m-4"


async def test_a_closed_push_stream_is_no_longer_a_live_target(
    live: LiveMcp, http: httpx.AsyncClient
) -> None:
    session_id = await open_raw_session(http, live.url)
    get_headers = {**session_headers(session_id), "Accept": "text/event-stream"}
    async with http.stream("GET", live.url, headers=get_headers) as stream:
        assert stream.status_code == 200
        await eventually(live.push_targets, "the push stream")
        assert gauge(live, "entrabot_push_streams") == 1
    await eventually(lambda: not live.hub.live_targets(), "the closed stream to leave the hub")
    state = live.mcp.sessions.get(session_id)
    assert state is not None and not state.push_stream_open  # the session itself lives on
    assert gauge(live, "entrabot_push_streams") == 0
    # A claimed message finds nobody, so the hub reports it instead of pushing into the void.
    [dispatch] = await live.hub.dispatch([chat_message("m-1")])
    assert dispatch.outcome is DispatchOutcome.NO_TARGET


async def test_a_non_push_host_with_a_stream_is_not_a_push_target(
    live: LiveMcp, http: httpx.AsyncClient
) -> None:
    session_id = await open_raw_session(http, live.url, client_name="cursor")
    get_headers = {**session_headers(session_id), "Accept": "text/event-stream"}
    async with http.stream("GET", live.url, headers=get_headers) as stream:
        assert stream.status_code == 200
        await eventually(
            lambda: live.mcp.sessions.is_streaming(session_id), "the stream to be seen"
        )
        assert live.hub.live_targets() == []
        state = live.mcp.sessions.get(session_id)
        assert state is not None and state.push_capable is False


async def test_delete_ends_the_session_and_its_id_then_answers_404(
    live: LiveMcp, http: httpx.AsyncClient
) -> None:
    session_id = await open_raw_session(http, live.url)
    assert gauge(live, "entrabot_mcp_sessions") == 1
    deleted = await http.delete(live.url, headers=session_headers(session_id))
    assert deleted.status_code == 200
    await eventually(
        lambda: live.mcp.sessions.get(session_id) is None, "the registry to drop the session"
    )
    assert gauge(live, "entrabot_mcp_sessions") == 0
    assert session_id not in live.mcp.event_stores
    listed = await http.post(
        live.url,
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        headers=session_headers(session_id),
    )
    assert listed.status_code == 404


async def test_unknown_session_id_answers_404(live: LiveMcp, http: httpx.AsyncClient) -> None:
    response = await http.post(
        live.url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers=session_headers("f" * 32),
    )
    assert response.status_code == 404


async def test_an_idle_session_expires_and_leaves_the_registry(http: httpx.AsyncClient) -> None:
    async with live_mcp(mcp_settings(mcp_session_idle_timeout_s=0.5)) as live:
        idle = await open_raw_session(http, live.url)
        streaming = await open_raw_session(http, live.url)
        get_headers = {**session_headers(streaming), "Accept": "text/event-stream"}
        async with http.stream("GET", live.url, headers=get_headers) as stream:
            assert stream.status_code == 200
            await eventually(
                lambda: live.mcp.sessions.get(idle) is None, "the idle session to expire"
            )
            # An open push stream is activity: that session outlives the idle one.
            assert live.mcp.sessions.is_streaming(streaming)
            assert [t.target_id for t in live.push_targets()] == [f"push:{streaming}"]
        listed = await http.post(
            live.url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers=session_headers(idle),
        )
        assert listed.status_code == 404
        await eventually(
            lambda: live.mcp.sessions.get(streaming) is None, "the second session to expire too"
        )
        assert live.hub.live_targets() == []
        assert gauge(live, "entrabot_mcp_sessions") == 0


async def test_a_modern_era_request_is_answered_without_opening_a_session(
    live: LiveMcp, http: httpx.AsyncClient
) -> None:
    body, headers = modern_request("server/discover")
    response = await http.post(live.url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert "2026-07-28" in response.json()["result"]["supportedVersions"]
    assert "mcp-session-id" not in response.headers
    assert live.mcp.sessions.sessions() == []


MODERN_ONLY = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
}


@pytest.mark.parametrize("request_id", ["probe-7", 0])
async def test_initialize_at_the_modern_era_is_refused_with_the_requests_id(
    live: LiveMcp, http: httpx.AsyncClient, request_id: str | int
) -> None:
    # 2026-07-28 has no handshake: the SDK's per-request path refuses an initialize sent at it, and the
    # error answers the request's own id (JSON-RPC 2.0 §5; the MCP conformance suite checks it).
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {},
    }
    response = await http.post(live.url, json=body, headers=MODERN_ONLY)
    assert response.status_code == 400 and response.json()["id"] == request_id
    assert live.mcp.sessions.sessions() == []


async def test_an_unparseable_modern_era_request_is_refused_with_a_null_id(
    live: LiveMcp, http: httpx.AsyncClient
) -> None:
    headers = {**MODERN_ONLY, "Content-Type": "application/json"}
    response = await http.post(live.url, content=b"{not json", headers=headers)
    assert response.status_code == 400 and response.json()["id"] is None


async def test_concurrent_sessions_get_their_own_pushes_only(
    live: LiveMcp, http: httpx.AsyncClient
) -> None:
    first, second = await open_raw_session(http, live.url), await open_raw_session(http, live.url)
    async with (
        http.stream(
            "GET", live.url, headers={**session_headers(first), "Accept": "text/event-stream"}
        ) as one,
        http.stream(
            "GET", live.url, headers={**session_headers(second), "Accept": "text/event-stream"}
        ) as two,
    ):
        await eventually(lambda: len(live.push_targets()) == 2, "both push streams")
        # One chat sticks to one host; two chats spread over both.
        dispatched = await live.hub.dispatch(
            [chat_message("a-1", chat_id="19:a"), chat_message("b-1", chat_id="19:b")]
        )
        by_target = {d.target_id: d.message_id for d in dispatched}
        assert set(by_target) == {f"push:{first}", f"push:{second}"}
        got_one = await anext(sse_events(one))
        got_two = await anext(sse_events(two))
        assert got_one.data["params"]["meta"]["message_id"] == by_target[f"push:{first}"]
        assert got_two.data["params"]["meta"]["message_id"] == by_target[f"push:{second}"]
        # Each session's history is its own: an event id of one session, sent with the other's session
        # id, is a position in the other's own push stream, and resumes that stream only.
        assert got_one.id is not None
        stolen = {
            **session_headers(second),
            "Accept": "text/event-stream",
            "Last-Event-ID": got_one.id,
        }
        async with http.stream("GET", live.url, headers=stolen) as resumed:
            chat_of_second = "19:a" if by_target[f"push:{second}"] == "a-1" else "19:b"
            [later] = await live.hub.dispatch([chat_message("second-2", chat_id=chat_of_second)])
            assert later.target_id == f"push:{second}"
            seen: list[str] = []
            async for event in sse_events(resumed):
                seen.append(event.data["params"]["meta"]["message_id"])
                if seen[-1] == "second-2":
                    break
        assert set(seen) <= {by_target[f"push:{second}"], "second-2"}, (
            f"the other session's pushes in {seen}"
        )
