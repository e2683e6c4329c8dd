"""A dropped push stream is resumed with Last-Event-ID on the same session; nothing is emitted twice. A POST
that dies on the wire fails that one message, not the session."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import ToolListChangedNotification
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.delivery.hub import DispatchOutcome
from service.mcp.acknowledging import ACK_METHOD
from tests.bridge.bridge_host import Received, bridge_host
from tests.bridge.tcp_balancer import TcpBalancer, tcp_balancer
from tests.mcp.server_fixture import LiveMcp, chat_message, eventually, live_mcp


def _log(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _upstream(live: LiveMcp) -> tuple[str, int]:
    parts = urlsplit(live.url)
    return parts.hostname or "127.0.0.1", parts.port or 80


@asynccontextmanager
async def _bridge_behind_balancer(
    live: LiveMcp, log: Path
) -> AsyncIterator[tuple[TcpBalancer, Received]]:
    """A bridge reaching ``live`` through the balancer, its push stream open."""
    async with (
        tcp_balancer([_upstream(live)]) as balancer,
        bridge_host(balancer.url(), log) as (_, received),
    ):
        await eventually(live.push_targets, "the bridge's push stream")
        yield balancer, received


async def test_dropped_stream_resumes_the_same_session_without_duplicates(
    live: LiveMcp, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    async with _bridge_behind_balancer(live, log) as (balancer, received):
        first = [chat_message(f"before-{i}") for i in range(3)]
        assert all(d.outcome is DispatchOutcome.DELIVERED for d in await live.hub.dispatch(first))
        await eventually(lambda: len(received.channel) == 3, "the first pushes")

        for cut in range(2):
            balancer.cut()
            await eventually(
                lambda: sum(1 for e in _log(log) if e.get("resumed") is True) > cut,
                "the push stream resumed with Last-Event-ID",
            )
        await eventually(live.push_targets, "the resumed push stream")
        after = [chat_message(f"after-{i}") for i in range(3)]
        delivered = [
            m
            for m, d in zip(after, await live.hub.dispatch(after), strict=True)
            if d.outcome is DispatchOutcome.DELIVERED
        ]
        await eventually(
            lambda: len(received.channel) == 3 + len(delivered), "the pushes after the drops"
        )

        ids = received.message_ids()
        assert len(ids) == len(set(ids)), f"emitted twice: {ids}"
        assert ids[:3] == [m.message_id for m in first]
        # One session throughout: the drops were resumed, never re-initialized.
        assert [e for e in _log(log) if e.get("message") == "fleet session opened"][-1][
            "sessions_opened"
        ] == 1
        assert len(live.mcp.sessions.sessions()) == 1


async def test_a_push_lost_on_a_dying_stream_is_replayed_by_last_event_id(
    live: LiveMcp, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    async with _bridge_behind_balancer(live, log) as (balancer, received):
        [first] = await live.hub.dispatch([chat_message("seen")])
        assert first.outcome is DispatchOutcome.DELIVERED
        await eventually(lambda: received.message_ids() == ["seen"], "the first push")

        balancer.swallow_replies()
        [lost] = await live.hub.dispatch([chat_message("swallowed")])
        assert lost.outcome is DispatchOutcome.DELIVERED  # the replica wrote it into the stream
        balancer.cut()

        await eventually(
            lambda: received.message_ids() == ["seen", "swallowed"], "the replayed push"
        )
        assert any(e.get("resumed") is True for e in _log(log))
        assert len(live.mcp.sessions.sessions()) == 1


async def test_the_host_is_told_to_relist_tools_when_the_fleet_becomes_reachable(
    live: LiveMcp, tmp_path: Path
) -> None:
    changes: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            changes.append(message.method)

    async with tcp_balancer([]) as balancer:  # nothing behind it yet: every connection is reset
        args = ("--push", "--request-timeout", "2")
        async with bridge_host(
            balancer.url(), tmp_path / "bridge.log", args=args, message_handler=on_message
        ) as (
            client,
            _,
        ):
            # No tools yet, and the list says why instead of being empty.
            with pytest.raises(MCPError, match=balancer.url()):
                await client.list_tools()
            balancer.upstreams = [_upstream(live)]
            await eventually(
                lambda: changes, "notifications/tools/list_changed on the host", timeout_s=30
            )
            assert sorted(t.name for t in (await client.list_tools()).tools) == [
                "echo",
                "wait_for_sponsor",
            ]


class AcknowledgementsSeen:
    """An ASGI layer around the replica's /mcp that keeps the keys of every acknowledgement it is posted."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.keys: list[tuple[str, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        while not messages or messages[-1].get("more_body", False):
            messages.append(await receive())
            if messages[-1]["type"] != "http.request":
                break
        body = b"".join(m.get("body", b"") for m in messages)
        if ACK_METHOD.encode() in body:
            self.keys += [(k[0], k[1]) for k in json.loads(body)["params"]["keys"]]

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


async def test_an_acknowledgement_whose_post_is_reset_is_sent_again_on_the_same_session(
    tmp_path: Path,
) -> None:
    seen: list[AcknowledgementsSeen] = []

    def record(app: ASGIApp) -> ASGIApp:
        seen.append(AcknowledgementsSeen(app))
        return seen[0]

    log = tmp_path / "bridge.log"
    async with (
        live_mcp(wrap_mcp=record) as live,
        _bridge_behind_balancer(live, log) as (balancer, received),
    ):
        [acks] = seen
        balancer.reset_when_sent(ACK_METHOD.encode())
        [first] = await live.hub.dispatch([chat_message("first")])
        assert first.outcome is DispatchOutcome.DELIVERED
        await eventually(lambda: received.message_ids() == ["first"], "the first push")
        await eventually(
            lambda: balancer.resets == 1, "the acknowledgement's POST reset on the wire"
        )
        await eventually(
            lambda: [k[1] for k in acks.keys] == ["first"], "the acknowledgement sent again"
        )

        [second] = await live.hub.dispatch([chat_message("second")])
        assert second.outcome is DispatchOutcome.DELIVERED
        await eventually(
            lambda: received.message_ids() == ["first", "second"], "a push after the reset"
        )
        # The same session throughout: a POST lost on the wire does not end it.
        assert [e for e in _log(log) if e.get("message") == "fleet session opened"][-1][
            "sessions_opened"
        ] == 1
        assert len(live.mcp.sessions.sessions()) == 1


async def test_a_tool_call_whose_post_is_reset_fails_alone_and_the_session_goes_on(
    live: LiveMcp, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    async with (
        tcp_balancer([_upstream(live)]) as balancer,
        bridge_host(balancer.url(), log) as (client, _),
    ):
        await eventually(live.push_targets, "the bridge's push stream")
        balancer.reset_when_sent(b'"tools/call"')
        lost = await client.call_tool("echo", {"text": "lost"})
        assert balancer.resets == 1
        assert lost.is_error and "may or may not have run" in lost.content[0].text  # type: ignore[union-attr]
        answered = await client.call_tool("echo", {"text": "answered"})
        assert not answered.is_error
        assert [e for e in _log(log) if e.get("message") == "fleet session opened"][-1][
            "sessions_opened"
        ] == 1
        assert len(live.mcp.sessions.sessions()) == 1
