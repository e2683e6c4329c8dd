"""A fake Anthropic Messages API on loopback with a scripted model, for driving the real Claude Code.

Claude Code asks only ``POST /v1/messages`` (streaming SSE or one JSON body) and
``POST /v1/messages/count_tokens`` of the model (TOOLCHAIN.md, "The real Claude Code": run). The event
sequence of a streamed message follows Anthropic's streaming reference (read, not run against the real
API): ``message_start``, per block ``content_block_start`` / ``content_block_delta`` (``text_delta`` or
``input_json_delta``) / ``content_block_stop``, then ``message_delta`` with the stop reason and
``message_stop``.

The model is a list of cues: the first cue whose condition holds for a request answers it, else the
model says ``DEFAULT_TEXT``. Every request body is recorded, so a test reads what Claude Code sent the
model: the tools it offered, the ``<channel`` blocks it passed on.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from service.devstack.uvicorn_runner import serve_app

DEFAULT_TEXT = "Nothing to do."
API_KEY = "sk-ant-test-0000000000000000000000000000fakeapikey"


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any]


Block = Text | ToolUse


@dataclass(frozen=True)
class RecordedRequest:
    """One ``/v1/messages`` body as Claude Code sent it, and when it arrived (``time.time()``)."""

    body: dict[str, Any]
    received_at: float

    def tool_names(self) -> list[str]:
        return [str(t.get("name")) for t in self.body.get("tools") or []]

    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    def last_user_blocks(self) -> list[dict[str, Any]]:
        """The content blocks of the newest user turn (a string content as one text block)."""
        users = [m for m in self.messages() if m.get("role") == "user"]
        if not users:
            return []
        content = users[-1].get("content")
        return (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        )

    def last_user_text(self) -> str:
        return "\n".join(
            str(b.get("text", "")) for b in self.last_user_blocks() if b.get("type") == "text"
        )

    def all_text(self) -> str:
        """Every text the request carries (system prompt aside): where ``<channel`` blocks are counted."""
        parts: list[str] = []
        for message in self.messages():
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
                continue
            for block in content or []:
                parts.append(str(block.get("text", "")))
                inner = block.get("content")
                if isinstance(inner, list):
                    parts.extend(str(b.get("text", "")) for b in inner if isinstance(b, dict))
                elif inner:
                    parts.append(str(inner))
        return "\n".join(parts)

    def tool_result_block(self, tool_name: str) -> dict[str, Any] | None:
        """The newest user turn's ``tool_result`` block for a call of ``tool_name``, if that turn has one."""
        names = {
            str(b.get("id")): str(b.get("name"))
            for m in self.messages()
            if m.get("role") == "assistant" and isinstance(m.get("content"), list)
            for b in m["content"]
            if b.get("type") == "tool_use"
        }
        return next(
            (
                b
                for b in self.last_user_blocks()
                if b.get("type") == "tool_result"
                and names.get(str(b.get("tool_use_id"))) == tool_name
            ),
            None,
        )

    def tool_result_of(self, tool_name: str) -> str | None:
        """The text of the newest user turn's result for a call of ``tool_name``, if that turn has one."""
        block = self.tool_result_block(tool_name)
        if block is None:
            return None
        inner = block.get("content")
        if isinstance(inner, list):
            return "\n".join(str(b.get("text", "")) for b in inner if isinstance(b, dict))
        return str(inner or "")

    def is_agent_turn(self) -> bool:
        """A request of the main loop (it offers tools), not a side request such as a title summary."""
        return bool(self.body.get("tools"))


Condition = Callable[[RecordedRequest], bool]


@dataclass(frozen=True)
class Cue:
    """When ``when`` holds, answer ``then``: fixed blocks, or blocks made from the request (say, a reply
    to the chat id a ``<channel`` block named)."""

    when: Condition
    then: Sequence[Block] | Callable[[RecordedRequest], Sequence[Block]]


def on_user_text(marker: str) -> Condition:
    """The newest user turn is text (not a tool result) containing ``marker``, in an agent turn."""
    return lambda r: (
        r.is_agent_turn()
        and marker in r.last_user_text()
        and not any(b.get("type") == "tool_result" for b in r.last_user_blocks())
    )


def after_tool(tool_name: str, *, containing: str = "") -> Condition:
    """The newest user turn carries the result of a ``tool_name`` call (that contains ``containing``)."""

    def holds(r: RecordedRequest) -> bool:
        result = r.tool_result_of(tool_name)
        return r.is_agent_turn() and result is not None and containing in result

    return holds


def tool_search(tool: str) -> ToolUse:
    """Claude Code defers MCP tools: the model selects one with ToolSearch before it can call it."""
    return ToolUse("ToolSearch", {"query": f"select:{tool}", "max_results": 5})


@dataclass
class ScriptedModel:
    cues: list[Cue] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)

    def answer(self, request: RecordedRequest) -> Sequence[Block]:
        self.requests.append(request)
        for cue in self.cues:
            if cue.when(request):
                return cue.then(request) if callable(cue.then) else cue.then
        return (Text(DEFAULT_TEXT),)

    def agent_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.is_agent_turn()]


def _content(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, Text):
            out.append({"type": "text", "text": block.text})
        else:
            out.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{uuid.uuid4().hex[:24]}",
                    "name": block.name,
                    "input": block.input,
                }
            )
    return out


def _message(model: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def _stream(message: dict[str, Any]) -> Iterator[str]:
    head = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    yield _sse("message_start", {"type": "message_start", "message": head})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            yield _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {**block, "input": {}},
                },
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield _sse(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def build_app(model: ScriptedModel) -> Starlette:
    async def messages(request: Request) -> Response:
        body = await request.json()
        recorded = RecordedRequest(body, time.time())
        message = _message(str(body.get("model", "claude")), _content(model.answer(recorded)))
        if body.get("stream"):
            return StreamingResponse(_stream(message), media_type="text/event-stream")
        return JSONResponse(message)

    async def count_tokens(request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"input_tokens": max(1, len(json.dumps(body)) // 4)})

    return Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        ]
    )


@dataclass(frozen=True)
class FakeAnthropic:
    base_url: str
    port: int
    model: ScriptedModel


@asynccontextmanager
async def fake_anthropic(model: ScriptedModel | None = None) -> AsyncIterator[FakeAnthropic]:
    scripted = model or ScriptedModel()
    async with serve_app(build_app(scripted)) as server:
        yield FakeAnthropic(server.base_url, server.port, scripted)
