"""The fake Responses API the Codex tests script: its policies, and the SSE Codex 0.171.0 was seen to read
(TOOLCHAIN.md). Fast: no Codex, no fleet."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fake_responses import (
    Answer,
    CallTool,
    FakeModel,
    Loop,
    ModelRequest,
    Script,
    Step,
    ToolOutput,
    fake_responses,
)

Result = tuple[
    str, dict[str, Any], str
]  # a tool's name, its arguments, its output as Codex sends it


def _request(*results: Result) -> ModelRequest:
    """A request whose input holds the prompt, then each (tool, arguments, output) as Codex replays it."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    ]
    for n, (name, arguments, output) in enumerate(results):
        call = {"call_id": f"call_{n}", "namespace": "mcp__fleet", "name": name}
        items.append({"type": "function_call", **call, "arguments": json.dumps(arguments)})
        items.append({"type": "function_call_output", "call_id": f"call_{n}", "output": output})
    return ModelRequest({"input": items}, 0.0)


def _page(cursor: int, more: bool) -> str:
    return "Wall time: 0.01 seconds\nOutput:\n" + json.dumps({"cursor": cursor, "more": more})


def test_a_script_plays_its_steps_one_per_tool_result_then_answers() -> None:
    script = Script([CallTool("whoami"), CallTool("list_watched_chats"), Answer("end")])
    assert script(_request()) == CallTool("whoami")
    assert script(_request(("whoami", {}, "{}"))) == CallTool("list_watched_chats")
    done: list[Result] = [("whoami", {}, "{}"), ("list_watched_chats", {}, "{}"), ("x", {}, "{}")]
    assert script(_request(*done)) == Answer()


def _cursor_loop(at_most: int) -> Loop:
    def arguments(last: ToolOutput | None) -> dict[str, Any]:
        return {} if last is None else {"cursor": last.json()["cursor"]}

    return Loop(
        "receive", again=lambda o: bool(o.json()["more"]), at_most=at_most, arguments=arguments
    )


def test_a_loop_calls_again_with_what_the_last_result_said_while_it_says_more() -> None:
    loop = _cursor_loop(at_most=5)
    assert loop(_request()) == CallTool("receive", {})
    first: Result = ("receive", {}, _page(7, more=True))
    assert loop(_request(first)) == CallTool("receive", {"cursor": 7})
    assert loop(_request(first, ("receive", {"cursor": 7}, _page(9, more=False)))) == Answer()


def test_a_loop_stops_after_at_most_calls_though_the_result_still_says_more() -> None:
    loop = _cursor_loop(at_most=2)
    results: list[Result] = [("receive", {}, _page(1, True)), ("receive", {}, _page(2, True))]
    assert loop(_request(results[0])) == CallTool("receive", {"cursor": 1})
    assert loop(_request(*results)) == Answer()


def test_a_tool_output_is_read_without_codexs_header_and_with_the_call_it_answers() -> None:
    [output] = _request(("whoami", {"a": 1}, _page(3, more=False))).tool_outputs()
    assert (output.namespace, output.name, output.arguments) == ("mcp__fleet", "whoami", {"a": 1})
    assert output.json() == {"cursor": 3, "more": False}
    assert ToolOutput("c", "n", "t", {}, "plain text").result == "plain text"


def _events(body: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")
    ]


async def _post(base_url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.post(
            f"{base_url}/v1/responses", json={"model": "m", "stream": True, "input": []}
        )


async def test_a_tool_call_streams_as_codex_reads_it_and_the_request_is_recorded() -> None:
    async with fake_responses(FakeModel(Script([CallTool("whoami", {"x": 1})]))) as api:
        response = await _post(api.base_url)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = _events(response.text)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.output_item.done",
        "response.completed",
    ]
    item = events[1]["item"]
    assert (item["type"], item["namespace"], item["name"]) == (
        "function_call",
        "mcp__fleet",
        "whoami",
    )
    assert json.loads(item["arguments"]) == {"x": 1} and item["call_id"]
    assert {"input_tokens", "output_tokens", "total_tokens"} <= set(events[2]["response"]["usage"])
    assert [r.body["model"] for r in api.model.requests] == ["m"]


async def test_an_answer_is_a_message_item_and_an_async_policy_is_awaited() -> None:
    async def policy(request: ModelRequest) -> Step:
        return Answer("all done")

    async with fake_responses(FakeModel(policy)) as api:
        events = _events((await _post(api.base_url)).text)
    item = events[1]["item"]
    assert (item["type"], item["role"]) == ("message", "assistant")
    assert item["content"] == [{"type": "output_text", "text": "all done", "annotations": []}]


async def test_a_policy_that_raises_is_a_500_and_recorded_and_other_paths_are_404() -> None:
    def broken(request: ModelRequest) -> Step:
        raise ValueError("no such step")

    async with fake_responses(FakeModel(broken)) as api:
        assert (await _post(api.base_url)).status_code == 500
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(f"{api.base_url}/v1/models")).status_code == 404
    assert api.model.errors == ["ValueError: no such step"]
    assert [(o.method, o.path) for o in api.model.other_requests] == [("GET", "/v1/models")]
