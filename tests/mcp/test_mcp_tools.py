"""The tool registry: typed tools in, schemas and structured results out."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel
from tool_results import result_text

from service.delivery.hub import DeliveryHub
from service.mcp.tool_registry import ToolCall, ToolError, ToolRegistry
from service.telemetry.metrics import DeliveryMetrics


class Question(BaseModel):
    chat_id: str
    limit: int = 10


class Answer(BaseModel):
    chat_id: str
    count: int


def no_session_call() -> ToolCall:
    return ToolCall(session=None, hub=DeliveryHub(DeliveryMetrics()), request_id=1)


def test_schemas_come_from_the_models_and_the_description_from_the_docstring() -> None:
    tools = ToolRegistry()

    @tools.tool()
    async def read_chat(args: Question, call: ToolCall) -> Answer:
        """Read the newest messages of a chat."""
        return Answer(chat_id=args.chat_id, count=args.limit)

    [definition] = tools.definitions()
    assert definition.name == "read_chat"
    assert definition.description == "Read the newest messages of a chat."
    assert definition.input_schema["type"] == "object" and definition.input_schema["required"] == [
        "chat_id"
    ]
    assert definition.output_schema is not None
    assert set(definition.output_schema["properties"]) == {"chat_id", "count"}


async def test_a_result_is_structured_content_and_the_same_json_as_text() -> None:
    tools = ToolRegistry()

    async def read_chat(args: Question, call: ToolCall) -> Answer:
        return Answer(chat_id=args.chat_id, count=args.limit)

    tools.add(read_chat, name="read_teams_messages", description="Read a chat.")
    result = await tools.call("read_teams_messages", {"chat_id": "19:x"}, no_session_call())
    assert not result.is_error
    assert result.structured_content == {"chat_id": "19:x", "count": 10}
    assert json.loads(result_text(result)) == result.structured_content


async def test_tool_errors_and_crashes_are_error_results_not_protocol_failures() -> None:
    tools = ToolRegistry()

    async def refuses(args: Question, call: ToolCall) -> Answer:
        raise ToolError("chat 19:x is not watched; call list_chats first")

    async def crashes(args: Question, call: ToolCall) -> Answer:
        raise RuntimeError("secret internal detail")

    tools.add(refuses)
    tools.add(crashes)
    refused = await tools.call("refuses", {"chat_id": "19:x"}, no_session_call())
    assert (
        refused.is_error
        and result_text(refused) == "chat 19:x is not watched; call list_chats first"
    )
    crashed = await tools.call("crashes", {"chat_id": "19:x"}, no_session_call())
    assert crashed.is_error and "secret" not in result_text(crashed)


async def _untyped(args, call):  # noqa: ANN001 - the point of the test
    return None


async def _wrong_arity(args: Question) -> Answer:
    return Answer(chat_id=args.chat_id, count=0)


def _sync(args: Question, call: ToolCall) -> Answer:
    return Answer(chat_id=args.chat_id, count=0)


@pytest.mark.parametrize(
    ("handler", "problem"),
    [
        (_untyped, "pydantic model"),
        (_wrong_arity, "exactly"),
        (_sync, "async"),
    ],
)
def test_a_tool_must_be_async_and_typed_with_models(handler: object, problem: str) -> None:
    with pytest.raises(TypeError, match=problem):
        ToolRegistry().add(handler)  # type: ignore[arg-type]


def test_tool_names_are_unique_and_valid() -> None:
    tools = ToolRegistry()

    async def read_chat(args: Question, call: ToolCall) -> Answer:
        return Answer(chat_id=args.chat_id, count=0)

    tools.add(read_chat)
    with pytest.raises(ValueError, match="already registered"):
        tools.add(read_chat)
    with pytest.raises(ValueError, match="not valid"):
        tools.add(read_chat, name="read chat")
