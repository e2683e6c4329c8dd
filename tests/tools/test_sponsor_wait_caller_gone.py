"""A sponsor wait whose host's connection closed without cancelling the call gives what it was handed
to the next wait, once (issue 22 item 3: "if the host disconnects before the result is written, the
message goes back for the next wait instead of being lost").

The SDK cancels a tool's handler only when the host sends ``notifications/cancelled`` or the session
ends. A POST whose connection merely closes (the host died, a proxy cut it) leaves the handler running:
the wait took the sponsor's reply and returned it into a stream nobody read. These tests run the real
thing: the replica's tools served by the fleet's MCP server on uvicorn, a raw HTTP client that drops
its POST, the chat poller claiming from the Graph emulator.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from service.delivery.claim_lookup import ClaimLookup
from service.delivery.host_keeper import HostKeeper
from service.delivery.host_records import HostRecords
from service.delivery.hub import TargetKind
from service.mcp.acknowledging import HOST_ID_HEADER
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from service.telemetry.metrics import DeliveryMetrics, LedgerMetrics
from tests.mcp import server_fixture as mcp
from tests.mcp.server_fixture import (
    PUSH_METHOD,
    LiveMcp,
    SseEvent,
    eventually,
    session_headers,
    sse_events,
)
from tests.tools.tool_world import ToolWorld

NON_PUSH_HOST = "codex"
GRACE_S = 0.5  # how long a dropped POST may take to resume before its wait counts its host gone


def wait_call(request_id: int, timeout_s: float) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "wait_for_sponsor_dm", "arguments": {"timeout_s": timeout_s}},
    }


def waits(world: ToolWorld) -> int:
    return sum(1 for t in world.hub.live_targets() if t.kind is TargetKind.SPONSOR_WAIT)


async def answer(
    http: httpx.AsyncClient, live: LiveMcp, session_id: str, body: dict[str, Any]
) -> SseEvent:
    """The JSON-RPC answer of one POST, read to its end."""
    async with http.stream(
        "POST", live.url, json=body, headers=session_headers(session_id)
    ) as response:
        assert response.status_code == 200, await response.aread()
        return await anext(e async for e in sse_events(response) if e.data.get("id") == body["id"])


async def dropped_wait(
    http: httpx.AsyncClient, live: LiveMcp, session_id: str, world: ToolWorld, request_id: int
) -> str | None:
    """Start a wait, and close its connection once the wait is registered (no cancel is sent).
    Returns the id of the stream's priming event, from which the host could resume."""
    async with http.stream(
        "POST", live.url, json=wait_call(request_id, 30), headers=session_headers(session_id)
    ) as response:
        assert response.status_code == 200
        priming = None
        async for (
            line
        ) in response.aiter_lines():  # the priming event comes first: its id is the resume point
            if line.startswith("id:"):
                priming = line[3:].strip()
                break
        await eventually(lambda: waits(world), "the wait registered in the hub")
    return priming


def message_ids(event: SseEvent) -> list[str]:
    result = event.data.get("result") or {}
    structured = result.get("structuredContent") or {}
    reply = structured.get("sponsor_reply")
    return ([reply["message_id"]] if reply else []) + [
        item["message_id"] for item in structured.get("backlog", [])
    ]


async def test_a_reply_taken_by_a_wait_whose_connection_closed_goes_to_the_next_wait_once(
    world: ToolWorld,
) -> None:
    async with (
        mcp.live_mcp(
            mcp.mcp_settings(), hub=world.hub, tools=world.tools, caller_grace_s=GRACE_S
        ) as live,
        httpx.AsyncClient(timeout=30) as http,
    ):
        session_id = await mcp.open_raw_session(http, live.url, NON_PUSH_HOST)
        await world.poller.cycle()  # the first sight of the watched chats, while nobody waits
        priming = await dropped_wait(http, live, session_id, world, request_id=2)
        # The sponsor answers right after the host's connection went; the replica claims it for the wait.
        reply_id = await world.inject(world.chat(0), "Ada", "Yes, go ahead.")
        await world.poller.cycle()

        second = asyncio.create_task(answer(http, live, session_id, wait_call(3, 20)))

        async def next_wait_answered() -> bool:
            await (
                world.poller.cycle()
            )  # a reply the dropped wait never claimed is claimed for this one
            return second.done()

        await eventually(next_wait_answered, "the next wait's answer", timeout_s=25)
        assert message_ids(second.result()) == [reply_id]

        # Never twice: a third wait gets nothing, and the dropped call's answer, replayed to a host that
        # resumes its stream after all, does not carry the reply either.
        third = await answer(http, live, session_id, wait_call(4, 0.5))
        assert third.data["result"]["structuredContent"]["outcome"] == "timeout"
        assert priming is not None
        async with http.stream(
            "GET", live.url, headers={**session_headers(session_id), "Last-Event-ID": priming}
        ) as resumed:
            replayed = await anext(e async for e in sse_events(resumed) if e.data.get("id") == 2)
        assert reply_id not in message_ids(replayed)


async def test_a_wait_whose_connection_closed_leaves_the_hub_so_nothing_is_claimed_for_it(
    world: ToolWorld,
) -> None:
    async with (
        mcp.live_mcp(
            mcp.mcp_settings(), hub=world.hub, tools=world.tools, caller_grace_s=GRACE_S
        ) as live,
        httpx.AsyncClient(timeout=30) as http,
    ):
        session_id = await mcp.open_raw_session(http, live.url, NON_PUSH_HOST)
        await dropped_wait(http, live, session_id, world, request_id=2)
        # Long before its 30 s timeout: a wait nobody can answer no longer makes the replica claim.
        await eventually(lambda: not waits(world), "the dropped wait out of the hub")


async def test_a_wait_whose_host_resumes_its_stream_in_time_answers_there_once(
    world: ToolWorld,
) -> None:
    """The SDK's client resumes a dropped POST stream with Last-Event-ID about a second later: the wait
    goes on, and its answer reaches the resumed stream."""
    async with (
        mcp.live_mcp(
            mcp.mcp_settings(), hub=world.hub, tools=world.tools, caller_grace_s=30.0
        ) as live,
        httpx.AsyncClient(timeout=30) as http,
    ):
        session_id = await mcp.open_raw_session(http, live.url, NON_PUSH_HOST)
        await world.poller.cycle()
        priming = await dropped_wait(http, live, session_id, world, request_id=2)
        assert priming is not None
        headers = {**session_headers(session_id), "Last-Event-ID": priming}
        async with http.stream("GET", live.url, headers=headers) as resumed:
            assert resumed.status_code == 200
            events = sse_events(resumed)
            reply_id = await world.inject(world.chat(0), "Ada", "Yes, go ahead.")
            await world.poller.cycle()
            answered = await anext(e async for e in events if e.data.get("id") == 2)
        assert message_ids(answered) == [reply_id]
        assert not waits(world)


async def test_the_reply_of_a_dropped_wait_of_a_host_that_acknowledges_is_pushed_to_that_host(
    world: ToolWorld,
) -> None:
    """A host that acknowledges (the bridge with --push) is owed such a reply in its delivery record: it is
    pushed on the host's push stream, on whichever replica that opens, until the host acknowledges."""
    keeper = HostKeeper(
        HostRecords(world.backend, LedgerMetrics()),
        ClaimLookup(world.backend),
        world.hub,
        "replica-test",
        metrics=DeliveryMetrics(),
    )
    async with (
        mcp.live_mcp(
            mcp.mcp_settings(),
            hub=world.hub,
            tools=world.tools,
            caller_grace_s=GRACE_S,
            keeper=keeper,
        ) as live,
        httpx.AsyncClient(timeout=30, headers={HOST_ID_HEADER: "host-a"}) as http,
    ):
        session_id = await mcp.open_raw_session(http, live.url, BRIDGE_PUSH_CLIENT_NAME)
        state = live.mcp.sessions.get(session_id)
        assert state is not None and state.host_id == "host-a"
        await world.poller.cycle()
        await dropped_wait(http, live, session_id, world, request_id=2)
        reply_id = await world.inject(world.chat(0), "Ada", "Yes, go ahead.")
        await world.poller.cycle()
        assert await eventually(
            lambda: _pending(world, "host-a"), "the reply owed to the host"
        ) == [reply_id]
        get_headers = {**session_headers(session_id), "Accept": "text/event-stream"}
        async with http.stream("GET", live.url, headers=get_headers) as stream:
            pushed = await anext(
                e async for e in sse_events(stream) if e.data.get("method") == PUSH_METHOD
            )
        assert pushed.data["params"]["meta"]["message_id"] == reply_id


async def _pending(world: ToolWorld, host_id: str) -> list[str]:
    record = await HostRecords(world.backend, LedgerMetrics()).read(host_id)
    return [e.message.message_id for e in record.pending]
