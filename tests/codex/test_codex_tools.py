"""The real Codex CLI as a host without pushes: it calls the fleet's tools over streamable HTTP, the real
results reach its model, and what it sends the fleet (protocol version, session, ``_meta.callId``, the
cancel at its tool timeout) is recorded on the way."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from fake_responses import Answer, CallTool, Loop, Script, ToolOutput

from service.devstack.traffic import Posted
from tests.bridge.fleet_stack import BridgeFleet
from tests.codex.codex_kit import CODEX_VERSION, CodexOptions, codex_session

pytestmark = [
    pytest.mark.slow,
    pytest.mark.fleet,
    pytest.mark.azurite,
    pytest.mark.xdist_group("codex"),
    pytest.mark.asyncio(loop_scope="module"),
]


async def test_codex_calls_whoami_and_the_replicas_answer_reaches_the_model(
    codex_fleet: BridgeFleet,
) -> None:
    replica = codex_fleet.fleet.members[0]
    script = Script([CallTool("whoami"), Answer("I am the fleet's agent.")])
    async with codex_session(replica.mcp_url, script) as codex:
        result = await codex.run("Who are you on Teams?")
    assert result.code == 0 and not codex.model.errors, (result.describe(), codex.model.errors)
    offered = codex.model.requests[0].tool_names()
    assert "mcp__fleet.whoami" in offered, (
        f"Codex {CODEX_VERSION} no longer offers the fleet's tools as namespace mcp__fleet: {offered}"
    )
    [output] = codex.model.tool_outputs()
    assert (output.namespace, output.name) == ("mcp__fleet", "whoami")
    answer = output.json()
    seed = codex_fleet.seed
    assert answer["replica_id"] == replica.name
    assert answer["agent_user_id"] == seed.agent_user.id
    assert {s["user_id"] for s in answer["sponsors"]} == {s.id for s in seed.sponsors}
    assert [(c["tool"], c["status"]) for c in result.tool_calls()] == [("whoami", "completed")]
    assert "I am the fleet's agent." in result.stdout


async def test_codex_asks_2025_06_18_keeps_one_session_and_names_each_model_call(
    codex_fleet: BridgeFleet,
) -> None:
    replica = codex_fleet.fleet.members[0]
    script = Script([CallTool("whoami"), CallTool("list_watched_chats"), Answer()])
    async with codex_session(replica.mcp_url, script) as codex:
        result = await codex.run("Who are you, and where?")
    assert result.code == 0, result.describe()
    recorder = codex.recorder
    [initialize] = recorder.sent("initialize")
    assert initialize["params"]["clientInfo"]["name"] == "codex-mcp-client"
    answered = recorder.answer_to(initialize)
    assert answered is not None
    assert initialize["params"]["protocolVersion"] == "2025-06-18"
    assert answered["result"]["protocolVersion"] == "2025-06-18", answered
    sessions = {e.headers.get("mcp-session-id") for e in recorder.exchanges[1:]}
    assert len(sessions) == 1 and None not in sessions, sessions
    streams = recorder.get_streams()
    assert [s.status for s in streams] == [200] and "text/event-stream" in streams[0].content_type
    assert recorder.exchanges[-1].method == "DELETE", "Codex left its session open"
    # _meta.callId is the model's call_id: a tool can tell a retried model call from a new one.
    calls = recorder.sent("tools/call")
    model_calls = {o.name: o.call_id for o in codex.model.tool_outputs()}
    assert {c["params"]["name"]: c["params"]["_meta"]["callId"] for c in calls} == model_calls
    assert all("progressToken" in c["params"]["_meta"] for c in calls), calls


async def test_codex_cancels_a_call_that_outlives_its_tool_timeout(
    codex_fleet: BridgeFleet,
) -> None:
    replica = codex_fleet.fleet.members[0]
    script = Script([CallTool("wait_for_sponsor_dm", {"timeout_s": 30}), Answer()])
    async with codex_session(replica.mcp_url, script, CodexOptions(tool_timeout_s=2)) as codex:
        result = await codex.run("Wait for a sponsor.")
    assert result.code == 0, result.describe()
    [call] = codex.recorder.sent("tools/call")
    cancels = codex.recorder.sent("notifications/cancelled")
    assert [c["params"]["requestId"] for c in cancels] == [call["id"]], (
        f"Codex {CODEX_VERSION} no longer cancels a call at its tool_timeout_sec: {cancels}"
    )
    [output] = codex.model.tool_outputs()
    assert "timed out" in output.result, output.result
    assert [c["status"] for c in result.tool_calls()] == ["failed"]


async def _post_three(fleet: BridgeFleet) -> list[Posted]:
    chat_id, humans = fleet.chats()[0]
    human = fleet.seed.find_user(humans[0])
    assert human is not None
    tag = uuid.uuid4().hex[:8]
    return [await fleet.traffic.post_chat(human, chat_id, f"page {i} {tag}") for i in range(3)]


def _ids(output: ToolOutput) -> list[str]:
    return [m["message_id"] for m in output.json()["messages"]]


async def test_codex_pages_back_through_a_chat_while_the_result_says_there_is_more(
    codex_fleet: BridgeFleet,
) -> None:
    # The loop an inbox host runs: call again, passing what the last result said, while it says more.
    posted = await _post_three(codex_fleet)
    since = datetime.fromisoformat(posted[0].created) - timedelta(milliseconds=1)
    first = {"chat_id": posted[0].chat_id, "limit": 1, "after": since.isoformat()}

    def arguments(last: ToolOutput | None) -> dict[str, object]:
        if last is None:
            return first
        return {**first, "before": last.json()["messages"][-1]["created"]}

    loop = Loop(
        "read_teams_messages",
        again=lambda last: bool(last.json()["more_available"]),
        at_most=5,
        arguments=arguments,
    )
    async with codex_session(codex_fleet.fleet.members[0].mcp_url, loop) as codex:
        result = await codex.run("Read that chat, page by page.")
    assert result.code == 0 and not codex.model.errors, (result.describe(), codex.model.errors)
    outputs = codex.model.tool_outputs()
    assert [i for o in outputs for i in _ids(o)] == [p.message_id for p in reversed(posted)]
    assert [o.json()["more_available"] for o in outputs] == [True, True, False]
    assert ["before" in o.arguments for o in outputs] == [False, True, True]
