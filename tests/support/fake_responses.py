"""A fake OpenAI Responses API on loopback with a scriptable model, for driving the real Codex CLI.

Codex asks ``POST /v1/responses`` with ``stream: true`` and reads SSE events (TOOLCHAIN.md, "A real
host without pushes": run): a tool call is ``response.output_item.done`` carrying a ``function_call``
item whose ``namespace`` is ``mcp__<server>`` (Codex 0.171.0 refuses the item without it) and whose
``name`` is the bare tool name; ``response.completed`` with a ``usage`` object ends every answer. The
next request's ``input`` carries the call again as a ``function_call`` item and the tool's result as a
``function_call_output`` with the same ``call_id``. A final answer is a ``message`` item with
``output_text``.

The model is a policy: given the request (the input so far, tool results included), it names the
next step, a tool call or a final answer. ``Script`` plays fixed steps in order; ``Loop`` calls one tool
again while its last result says there is more, at most N times, passing on what the last result says
(a cursor, say). A policy may be a coroutine, so a test can hold the model's answer until something
happened elsewhere. Every request, every tool output and anything else Codex asked is recorded, so a
test reads what reached the model.
"""

from __future__ import annotations

import inspect
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from service.devstack.uvicorn_runner import serve_app

API_KEY = "sk-fake-responses-0000000000000000"
DONE = "Done."
_RESULT_MARKER = "\nOutput:\n"


@dataclass(frozen=True)
class CallTool:
    """Call the MCP tool ``name`` of the server Codex's config names ``server``."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    server: str = "fleet"

    @property
    def namespace(self) -> str:
        return f"mcp__{self.server}"


@dataclass(frozen=True)
class Answer:
    """A final answer: the turn ends, and ``codex exec`` with it."""

    text: str = DONE


Step = CallTool | Answer


@dataclass(frozen=True)
class ToolOutput:
    """One tool call as the model saw it come back: the call Codex replayed and its result."""

    call_id: str
    namespace: str
    name: str
    arguments: dict[str, Any]
    output: str  # as Codex sent it, its own header included

    @property
    def result(self) -> str:
        """The tool's result without the header Codex 0.171.0 put before it here ("Wall time: 0.01
        seconds", "Output:"), so a test reads what the tool said."""
        head, marker, rest = self.output.partition(_RESULT_MARKER)
        return rest if marker and head.startswith("Wall time:") else self.output

    def json(self) -> Any:
        """The result parsed as JSON: Codex passes an MCP tool's structured result as its JSON text."""
        return json.loads(self.result)


def _output_text(output: Any) -> str:
    """A ``function_call_output``'s ``output``: a string, or a list of content items (text joined)."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(str(i.get("text", "")) for i in output if isinstance(i, dict))
    return json.dumps(output)


def _arguments(raw: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {"_unparsed": raw}
    return parsed if isinstance(parsed, dict) else {"_value": parsed}


@dataclass(frozen=True)
class ModelRequest:
    """One ``/v1/responses`` body as Codex sent it, and when it arrived (``time.time()``)."""

    body: dict[str, Any]
    received_at: float

    def input_items(self) -> list[dict[str, Any]]:
        items = self.body.get("input") or []
        return [i for i in items if isinstance(i, dict)]

    def tool_outputs(self) -> list[ToolOutput]:
        """Every tool result in the input, oldest first, each with the call it answers."""
        calls = {
            str(i.get("call_id")): i for i in self.input_items() if i.get("type") == "function_call"
        }
        found: list[ToolOutput] = []
        for item in self.input_items():
            if item.get("type") != "function_call_output":
                continue
            call = calls.get(str(item.get("call_id")), {})
            found.append(
                ToolOutput(
                    call_id=str(item.get("call_id")),
                    namespace=str(call.get("namespace", "")),
                    name=str(call.get("name", "")),
                    arguments=_arguments(call.get("arguments", "{}")),
                    output=_output_text(item.get("output")),
                )
            )
        return found

    def outputs_of(self, tool: str) -> list[ToolOutput]:
        return [o for o in self.tool_outputs() if o.name == tool]

    def user_text(self) -> str:
        """The text of every user message in the input (the prompt, and what Codex adds as the user)."""
        return "\n".join(
            str(c.get("text", ""))
            for i in self.input_items()
            if i.get("type") == "message" and i.get("role") == "user"
            for c in i.get("content") or []
            if isinstance(c, dict)
        )

    def tool_names(self) -> list[str]:
        """The tools offered, as ``<namespace>.<name>`` for a namespace's tools, else the bare name."""
        names: list[str] = []
        for tool in self.body.get("tools") or []:
            inner = tool.get("tools") if isinstance(tool, dict) else None
            if isinstance(inner, list):
                names.extend(f"{tool.get('name')}.{t.get('name')}" for t in inner)
            elif isinstance(tool, dict):
                names.append(str(tool.get("name")))
        return names

    def mentions(self, text: str) -> bool:
        """``text`` appears anywhere in the body: instructions, input, tools."""
        return text in json.dumps(self.body, ensure_ascii=False)


Policy = Callable[[ModelRequest], Step | Awaitable[Step]]


@dataclass(frozen=True)
class Script:
    """The steps in order: the next one is the one after as many tool results as the input holds."""

    steps: Sequence[Step]

    def __call__(self, request: ModelRequest) -> Step:
        done = len(request.tool_outputs())
        return self.steps[done] if done < len(self.steps) else Answer()


@dataclass(frozen=True)
class Loop:
    """Call ``tool`` with ``arguments(None)``, then with ``arguments(last result)`` while ``again(last
    result)`` holds, ``at_most`` calls in all; then answer ``answer``. Counted from the input, so the
    loop is what Codex replayed, not what this object remembers."""

    tool: str
    again: Callable[[ToolOutput], bool]
    at_most: int
    arguments: Callable[[ToolOutput | None], dict[str, Any]] = lambda _: {}
    answer: str = DONE
    server: str = "fleet"

    def __call__(self, request: ModelRequest) -> Step:
        outputs = request.outputs_of(self.tool)
        if not outputs:
            return CallTool(self.tool, self.arguments(None), self.server)
        last = outputs[-1]
        if len(outputs) < self.at_most and self.again(last):
            return CallTool(self.tool, self.arguments(last), self.server)
        return Answer(self.answer)


@dataclass(frozen=True)
class OtherRequest:
    """A request to anything but ``POST /v1/responses`` (answered 404)."""

    method: str
    path: str


@dataclass
class FakeModel:
    policy: Policy = field(default_factory=lambda: Script(()))
    requests: list[ModelRequest] = field(default_factory=list)
    other_requests: list[OtherRequest] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a policy that raised: the test's own bug

    async def answer(self, request: ModelRequest) -> Step:
        self.requests.append(request)
        step = self.policy(request)
        return await step if inspect.isawaitable(step) else step

    def tool_outputs(self) -> list[ToolOutput]:
        """Every distinct tool result the model was sent, in the order it first saw them."""
        seen: dict[str, ToolOutput] = {}
        for request in self.requests:
            for output in request.tool_outputs():
                seen.setdefault(output.call_id, output)
        return list(seen.values())

    def mentioned(self, text: str) -> list[ModelRequest]:
        return [r for r in self.requests if r.mentions(text)]


def _item(step: Step) -> dict[str, Any]:
    if isinstance(step, Answer):
        return {
            "type": "message",
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": step.text, "annotations": []}],
        }
    return {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex[:24]}",
        "call_id": f"call_{uuid.uuid4().hex[:24]}",
        "namespace": step.namespace,
        "name": step.name,
        "arguments": json.dumps(step.arguments),
        "status": "completed",
    }


def _sse(data: dict[str, Any]) -> str:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"


def _events(step: Step) -> Iterator[str]:
    response_id = f"resp_{uuid.uuid4().hex[:24]}"
    yield _sse({"type": "response.created", "response": {"id": response_id}})
    yield _sse({"type": "response.output_item.done", "output_index": 0, "item": _item(step)})
    usage = {
        "input_tokens": 10,
        "input_tokens_details": None,
        "output_tokens": 5,
        "output_tokens_details": None,
        "total_tokens": 15,
    }
    yield _sse(
        {
            "type": "response.completed",
            "response": {"id": response_id, "status": "completed", "usage": usage},
        }
    )


def build_app(model: FakeModel) -> Starlette:
    async def responses(request: Request) -> Response:
        body = await request.json()
        try:
            step = await model.answer(ModelRequest(body, time.time()))
        except Exception as exc:  # noqa: BLE001 - the test reads it; Codex only sees a 500
            model.errors.append(f"{type(exc).__name__}: {exc}")
            return JSONResponse({"error": {"message": str(exc)}}, status_code=500)
        return StreamingResponse(_events(step), media_type="text/event-stream")

    async def other(request: Request) -> Response:
        model.other_requests.append(OtherRequest(request.method, request.url.path))
        return JSONResponse({"error": {"message": "not faked"}}, status_code=404)

    return Starlette(
        routes=[
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/{path:path}", other, methods=["GET", "POST", "PUT", "DELETE"]),
        ]
    )


@dataclass(frozen=True)
class FakeResponses:
    base_url: str  # without /v1: Codex's provider ``base_url`` is ``{base_url}/v1``
    port: int
    model: FakeModel


@asynccontextmanager
async def fake_responses(model: FakeModel | None = None) -> AsyncIterator[FakeResponses]:
    scripted = model or FakeModel()
    async with serve_app(build_app(scripted)) as server:
        yield FakeResponses(server.base_url, server.port, scripted)
