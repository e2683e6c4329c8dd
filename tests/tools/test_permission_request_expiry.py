"""A permission request ends at its expiry, whatever the asking host's stream was doing then.

A sponsor's "yes <id>" after the request expired decides nothing (issue 15 item 2): it is an
ordinary message, never relayed as an allow verdict. Real permission requests, the emulator
over HTTP, the ledgers on a LocalBackend; the test drives the chat poll's cycles and the asking
session's stream state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from pydantic import BaseModel

from service.ledger.memory.permission_requests import PermissionRequests, Standing
from service.mcp.tool_registry import SessionChannel, ToolCall
from service.telemetry.metrics import LedgerMetrics
from service.tools.permission_relay import PermissionRelay, PermissionRequestInput
from tests.tools.test_sponsor_wait_takes_one import bootstrap_every_chat
from tests.tools.tool_world import RecordingPushTarget, ToolWorld, session

REQUEST_ID = "kdtqz"
BOUNDED_WAITS = 1000


@dataclass
class BridgeStream:
    """The asking bridge session's push stream: open or dropped, and what was pushed on it."""

    open: bool = True
    pushed: list[BaseModel] = field(default_factory=list)

    async def send(self, notification: BaseModel) -> None:
        self.pushed.append(notification)

    def is_open(self) -> bool:
        return self.open


async def ask(
    world: ToolWorld, ttl: timedelta, stream: BridgeStream
) -> tuple[PermissionRelay, PermissionRequests]:
    requests = PermissionRequests(
        world.backend, world.deps.replica_id, clock=world.clock, metrics=LedgerMetrics()
    )
    relay = PermissionRelay(world.deps, requests, ttl)
    call = ToolCall(
        session=session("bridge", push=True),
        hub=world.hub,
        request_id=1,
        channel=SessionChannel(send=stream.send, is_open=stream.is_open),
    )
    await relay.ask_sponsors(
        PermissionRequestInput(
            request_id=REQUEST_ID, tool_name="Bash", description="deploy", input_preview="make"
        ),
        call,
    )
    return relay, requests


async def late_yes_is_an_ordinary_message(
    world: ToolWorld, stream: BridgeStream, requests: PermissionRequests
) -> None:
    assert await requests.standing(REQUEST_ID) is Standing.NONE
    host = RecordingPushTarget()
    world.hub.register(host)
    yes = await world.inject(world.chat(0), "Ada", f"yes {REQUEST_ID}")
    await world.poller.cycle()
    assert stream.pushed == []  # no verdict for an expired request
    assert [m.message_id for m in host.received] == [yes]  # the reply is what it now is: a message


async def test_a_reply_after_expiry_decides_nothing_though_the_stream_was_down_when_it_expired(
    world: ToolWorld,
) -> None:
    await bootstrap_every_chat(world)
    stream = BridgeStream()
    relay, requests = await ask(world, timedelta(seconds=1), stream)
    stream.open = False  # the bridge's stream drops; its session lives on
    for _ in range(BOUNDED_WAITS):
        if not relay.deps.hub.background.running:  # the expiry ran
            break
        await asyncio.sleep(0.01)
    assert not relay.deps.hub.background.running, "the request's expiry never ran"
    stream.open = True  # the bridge resumes the same session with Last-Event-ID
    await late_yes_is_an_ordinary_message(world, stream, requests)


async def test_a_reply_after_the_recorded_expiry_decides_nothing_before_the_replica_timer_fires(
    world: ToolWorld,
) -> None:
    # The fleet's record expires at the ask's start; this replica's timer started after the sponsors
    # were asked, so it fires later. Between the two, the request is over for every other replica.
    await bootstrap_every_chat(world)
    stream = BridgeStream()
    _, requests = await ask(world, timedelta(minutes=10), stream)
    world.clock.pinned = world.clock() + timedelta(minutes=10, seconds=1)
    await late_yes_is_an_ordinary_message(world, stream, requests)


async def test_the_ask_and_the_relayed_verdict_are_in_the_audit_trail_with_the_bridge_that_asked(
    world: ToolWorld,
) -> None:
    await bootstrap_every_chat(world)
    stream = BridgeStream()
    await ask(world, timedelta(minutes=10), stream)
    yes = await world.inject(world.chat(0), "Ada", f"yes {REQUEST_ID}")
    await world.poller.cycle()
    assert len(stream.pushed) == 1  # the verdict went back to the asking session
    out = await world.ok("read_interactions", {"direction": "out"})
    trail = [
        (r["action"], r["message_id"], r["host"], r["session"], r["replica"])
        for r in out["records"]
        if r["action"] in ("permission_asked", "verdict_relayed")
    ]
    assert trail == [
        ("permission_asked", None, "claude-code/1.0", "bridge", "replica-test"),
        ("verdict_relayed", yes, "claude-code/1.0", "bridge", "replica-test"),
    ]
    relayed = next(r for r in out["records"] if r["action"] == "verdict_relayed")
    assert "allow" in relayed["content"] and REQUEST_ID in relayed["content"]
