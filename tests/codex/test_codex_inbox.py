"""The real Codex CLI drains the fleet's inbox (``receive_messages``, SPEC §11) exactly once.

Two replica processes; Codex calls one of them, its model a policy that does what the tool's description
asks: call in a loop, first without a cursor, then always with the cursor of the last result, until a
call comes back empty. What reached the model is read from the tool results the fake Responses API was
sent; what the fleet answered Codex, from the recording proxy in front of the replica, which can also
hold an answer back until Codex cancelled the call. Every test uses the one host the fleet's shared dev
token names (``default``) and leaves its inbox empty, everything acknowledged, so the next one starts
from nothing owed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from eventually import SLOW_WAIT_S, eventually
from fake_responses import Answer, CallTool, ModelRequest, Step, ToolOutput

from service.delivery.claim_lookup import SETTLE_AFTER_S
from service.delivery.host_record import EntryState
from service.mcp.host_identity import SHARED_DEFAULT
from tests.bridge.fleet_stack import BridgeFleet
from tests.codex.codex_kit import (
    CODEX_VERSION,
    CodexOptions,
    CodexResult,
    CodexSession,
    codex_session,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.fleet,
    pytest.mark.azurite,
    pytest.mark.xdist_group("codex"),
    pytest.mark.asyncio(loop_scope="module"),
]

RECEIVE = "receive_messages"
PROMPT = "Read your inbox until it is empty."
EMPTY_WAIT_S = 3.0  # an empty result after this long ends a drain
TOOL_TIMEOUT_S = 3.0
LONG_WAIT_S = 30.0  # longer than TOOL_TIMEOUT_S: Codex cancels such a call
REQUEST_CANCELLED = -32800  # the JSON-RPC error the MCP SDK answers a cancelled request with
SHORT_WAIT_S = 1.0  # shorter than TOOL_TIMEOUT_S: an empty result comes back before Codex gives up
Key = tuple[str, str]  # (chat_id, message_id): Teams ids are unique only within a chat


def _result(output: ToolOutput) -> dict[str, Any] | None:
    """A receive_messages result as the model read it; None for a call that failed (timed out)."""
    try:
        parsed = output.json()
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) and "cursor" in parsed else None


def _keys(result: dict[str, Any]) -> list[Key]:
    return [(m["chat_id"], m["message_id"]) for m in result["messages"]]


@dataclass
class InboxLoop:
    """The model's loop: ``receive_messages`` without a cursor, then with the cursor of the last result
    it got (after a failed call, the same one again), until a call returns nothing; the first calls
    wait ``first`` seconds, the others ``wait_s``. ``awaited`` are the messages the test posted: an
    empty result before all of them came (one still on its way to a replica's claim) does not end the
    loop. At most ``at_most`` calls."""

    awaited: set[Key] = field(default_factory=set)
    wait_s: float = EMPTY_WAIT_S
    first: tuple[float, ...] = ()
    at_most: int = 10

    def __call__(self, request: ModelRequest) -> Step:
        outputs = request.outputs_of(RECEIVE)
        results = [r for r in map(_result, outputs) if r is not None]
        if outputs:
            last = _result(outputs[-1])
            seen = {k for r in results for k in _keys(r)}
            drained = last is not None and not last["messages"] and self.awaited <= seen
            if drained or len(outputs) >= self.at_most:
                return Answer()
        n = len(outputs)
        arguments: dict[str, Any] = {
            "wait_s": self.first[n] if n < len(self.first) else self.wait_s
        }
        if results:
            arguments["cursor"] = results[-1]["cursor"]
        return CallTool(RECEIVE, arguments)


def receive_outputs(codex: CodexSession) -> list[ToolOutput]:
    """Every receive_messages call as the model saw it come back, in order."""
    return [o for o in codex.model.tool_outputs() if o.name == RECEIVE]


def results_of(codex: CodexSession) -> list[dict[str, Any]]:
    """The results that reached the model, in order; each call passed the cursor of the last result
    before it (none before the first: a fresh Codex has none)."""
    results: list[dict[str, Any]] = []
    for output in receive_outputs(codex):
        assert output.arguments.get("cursor") == (results[-1]["cursor"] if results else None)
        result = _result(output)
        if result is not None:
            results.append(result)
    return results


async def run_drain(codex: CodexSession) -> list[dict[str, Any]]:
    result = await codex.run(PROMPT)
    assert result.code == 0 and not codex.model.errors, (result.describe(), codex.model.errors)
    assert not any(failed_calls(receive_outputs(codex))), [o.output for o in receive_outputs(codex)]
    results = results_of(codex)
    assert results[-1]["messages"] == [], "the loop ended before the inbox was empty"
    return results


async def post(
    fleet: BridgeFleet, label: str, *, per_chat: int = 1, chats: int = 3
) -> dict[Key, str]:
    """People post in the agent's watched chats (one of them Ada, its sponsor, 1:1): key -> text."""
    await fleet.wait_bootstrapped()  # before that a message meets first-sight rules
    tag = uuid.uuid4().hex[:8]
    posted: dict[Key, str] = {}
    for chat_id, humans in fleet.chats()[:chats]:
        human = fleet.seed.find_user(humans[-1])
        assert human is not None
        for i in range(per_chat):
            text = f"{label} {i} {tag}"
            sent = await fleet.traffic.post_chat(human, chat_id, text)
            posted[(sent.chat_id, sent.message_id)] = text
    return posted


def assert_reached_once(results: list[dict[str, Any]], posted: dict[Key, str]) -> None:
    """Each posted message in exactly one result, its text inside, and nothing else."""
    got = Counter(k for r in results for k in _keys(r))
    assert got == Counter(posted.keys()), f"twice: {[k for k, n in got.items() if n > 1]}; " + (
        f"missing: {set(posted) - set(got)}; not posted: {set(got) - set(posted)}"
    )
    for result in results:
        for message in result["messages"]:
            assert posted[(message["chat_id"], message["message_id"])] in message["content"]


def nth_receive(n: int) -> Callable[[dict[str, Any]], bool]:
    """Picks the ``n``-th ``tools/call`` of receive_messages the host sends."""
    count = 0

    def matches(message: dict[str, Any]) -> bool:
        nonlocal count
        if message.get("method") == "tools/call" and message["params"].get("name") == RECEIVE:
            count += 1
        return count == n

    return matches


@dataclass
class Paused:
    """``loop``, whose call number ``before`` waits until the test resumes it (the model thinking):
    the test acts in between."""

    loop: InboxLoop
    before: int
    paused: asyncio.Event = field(default_factory=asyncio.Event)
    resumed: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, request: ModelRequest) -> Step:
        if len(request.outputs_of(RECEIVE)) == self.before - 1:
            self.paused.set()
            async with asyncio.timeout(SLOW_WAIT_S):
                await self.resumed.wait()
        return self.loop(request)


async def owed(fleet: BridgeFleet, keys: Collection[Key]) -> None:
    """Until the host's record in the container owes ``keys`` to a call on any replica: claimed for it,
    and either live or an intent older than SETTLE_AFTER_S. A younger intent is left to the replica
    writing its claim: a call there returns it at once, a call on the other replica a few seconds later
    (when it looks again), which may be a later call than the next."""

    async def found() -> bool:
        record = await fleet.ledger.host_record(SHARED_DEFAULT)
        if record is None:
            return False
        settled_by = datetime.now(UTC) - timedelta(seconds=SETTLE_AFTER_S)
        ready = {e.key for e in record.pending if e.state is EntryState.LIVE or e.at < settled_by}
        return set(keys) <= ready

    await eventually(found, "the messages owed in the host's record", timeout_s=SLOW_WAIT_S)


@asynccontextmanager
async def running(codex: CodexSession) -> AsyncIterator[asyncio.Task[CodexResult]]:
    """``codex exec`` in the background while the block acts; cancelled if the block fails."""
    run = asyncio.create_task(codex.run(PROMPT))
    try:
        yield run
    except BaseException:
        run.cancel()
        raise


def failed_calls(outputs: list[ToolOutput]) -> list[bool]:
    return [_result(o) is None for o in outputs]


async def test_codex_drains_the_inbox_once_and_a_restart_on_the_other_replica_gets_the_rest(
    codex_inbox_fleet: BridgeFleet,
) -> None:
    fleet = codex_inbox_fleet
    r0, r1 = fleet.fleet.members
    before = await post(fleet, "before", per_chat=2)
    async with codex_session(r0.mcp_url, InboxLoop(set(before))) as codex:
        first = await run_drain(codex)
    # The first run ended on an empty result: the cursor it never sent acknowledged nothing, so all it
    # was given is acknowledged. Codex restarts, against the other replica, with no cursor.
    between = await post(fleet, "between")
    async with codex_session(r1.mcp_url, InboxLoop(set(between))) as codex:
        second = await run_drain(codex)
    assert_reached_once(first + second, before | between)
    assert {k for r in first for k in _keys(r)} == set(before)
    assert {k for r in second for k in _keys(r)} == set(between)  # nothing acknowledged came back
    sponsor = fleet.seed.sponsors[0].id
    for message in (m for r in first + second for m in r["messages"]):
        assert message["verified_sponsor"] == (message["sender_id"] == sponsor), message
        assert message["verified_sponsor"] or message["content"].startswith("<external_content")


async def test_a_message_posted_during_a_wait_codex_cancelled_reaches_the_model_in_the_next_call(
    codex_inbox_fleet: BridgeFleet,
) -> None:
    # Calls 1 and 2 wait longer than Codex's tool timeout, and Codex cancels each. Nothing comes during
    # call 1: the fleet's wait ends at the cancel. A message is posted during call 2; whatever the fleet
    # answered it reaches Codex only after its cancel (the recording proxy holds it), so the cancel
    # happens even when the claim was quick enough to be in that answer. The model thinks until the
    # message is claimed, then calls again with the same cursor (none: no result reached it yet).
    fleet = codex_inbox_fleet
    await fleet.wait_bootstrapped()
    loop = InboxLoop(wait_s=SHORT_WAIT_S, first=(LONG_WAIT_S, LONG_WAIT_S))
    policy = Paused(loop, before=3)
    options = CodexOptions(tool_timeout_s=TOOL_TIMEOUT_S)
    async with codex_session(fleet.fleet.members[0].mcp_url, policy, options) as codex:
        held = codex.recorder.hold_answer(nth_receive(2))
        async with running(codex) as run:
            await eventually(lambda: held.request, "Codex's second call", timeout_s=SLOW_WAIT_S)
            posted = await post(fleet, "during a cancelled wait", chats=1)
            loop.awaited.update(posted)
            await owed(fleet, posted)
            policy.resumed.set()
        result = await run
    assert result.code == 0 and not codex.model.errors, (result.describe(), codex.model.errors)
    calls = [c for c in codex.recorder.sent("tools/call") if c["params"]["name"] == RECEIVE]
    cancels = codex.recorder.sent("notifications/cancelled")
    assert [c["params"]["requestId"] for c in cancels] == [c["id"] for c in calls[:2]], (
        f"Codex {CODEX_VERSION} no longer cancels a call at its tool_timeout_sec: {cancels}"
    )
    # The fleet ended call 1's wait when the cancel came (the MCP SDK answers it "Request cancelled").
    ended = codex.recorder.answer_to(calls[0])
    assert ended is not None and ended.get("error", {}).get("code") == REQUEST_CANCELLED, ended
    outputs = receive_outputs(codex)
    assert failed_calls(outputs) == [True, True, False, False], [o.output for o in outputs]
    assert all(
        o.result.endswith(f"timed out awaiting tools/call after {TOOL_TIMEOUT_S:g}s")
        for o in outputs[:2]
    )
    [then, last] = results_of(codex)
    assert set(_keys(then)) == set(posted), "not in the call after the cancelled one"
    assert last["messages"] == []
    assert_reached_once([then, last], posted)


async def test_a_result_codex_cancelled_before_it_arrived_comes_back_in_the_next_call(
    codex_inbox_fleet: BridgeFleet,
) -> None:
    # Call 1 looks (nothing). A message is posted and claimed for the host. Call 2, with call 1's
    # cursor, waits longer than Codex's tool timeout: the fleet returns the message at once, but its
    # answer is held back until Codex cancelled the call (the answer and the cancel crossing). The
    # fleet gave the message out; the model never had it. Call 3 passes the same cursor as call 2.
    fleet = codex_inbox_fleet
    await fleet.wait_bootstrapped()
    loop = InboxLoop(wait_s=SHORT_WAIT_S, first=(SHORT_WAIT_S, LONG_WAIT_S))
    policy = Paused(loop, before=2)
    options = CodexOptions(tool_timeout_s=TOOL_TIMEOUT_S)
    async with codex_session(fleet.fleet.members[0].mcp_url, policy, options) as codex:
        held = codex.recorder.hold_answer(nth_receive(2))
        async with running(codex) as run:
            await eventually(policy.paused.is_set, "Codex's first call", timeout_s=SLOW_WAIT_S)
            posted = await post(fleet, "given out, never seen", chats=1)
            loop.awaited.update(posted)
            await owed(fleet, posted)
            policy.resumed.set()
        result = await run
    assert result.code == 0 and not codex.model.errors, (result.describe(), codex.model.errors)
    assert held.request is not None
    answered = codex.recorder.answer_to(held.request)
    assert answered is not None and "result" in answered, answered
    given = answered["result"]["structuredContent"]
    assert set(_keys(given)) == set(posted), "the fleet did not give the message out in call 2"
    [cancel] = codex.recorder.sent("notifications/cancelled")
    assert cancel["params"]["requestId"] == held.request["id"]
    outputs = receive_outputs(codex)
    assert failed_calls(outputs) == [False, True, False, False], [o.output for o in outputs]
    first, then, last = [r for r in map(_result, outputs) if r is not None]
    assert first["messages"] == []
    assert outputs[1].arguments["cursor"] == outputs[2].arguments["cursor"] == first["cursor"]
    assert given["cursor"] == then["cursor"]  # the same entries as the answer Codex never read
    assert set(_keys(then)) == set(posted), "not in the call after the cancelled one"
    assert last["messages"] == []
    assert_reached_once([first, then, last], posted)


async def test_a_message_posted_while_no_codex_runs_is_owed_to_it_and_reaches_its_next_run(
    codex_inbox_fleet: BridgeFleet,
) -> None:
    fleet = codex_inbox_fleet
    replica = fleet.fleet.members[1]
    async with codex_session(replica.mcp_url, InboxLoop()) as codex:
        before = await run_drain(codex)  # the host is an inbox host from this call on
    assert [k for r in before for k in _keys(r)] == []
    posted = await post(fleet, "while away", chats=2)

    await owed(fleet, posted)  # claimed for the host while no Codex runs
    async with codex_session(replica.mcp_url, InboxLoop(set(posted))) as codex:
        after = await run_drain(codex)
    assert set(_keys(after[0])) == set(posted), "not in the next run's first call"
    assert_reached_once(after, posted)
