"""Tools as typed async functions: a pydantic model in, a pydantic model out, and the call's context.

    tools = ToolRegistry()

    @tools.tool()
    async def send_teams_message(args: SendInput, call: ToolCall) -> SendResult:
        '''Send a message to a Teams chat.'''   # the description hosts see
        ...

The input model's JSON schema is the tool's ``inputSchema`` and the output model's its
``outputSchema``; results go out as structured content plus the same JSON as text. Hand-written over
the SDK's low-level tool handlers rather than ``MCPServer`` because ``MCPServer`` configures
process-wide logging when it is built, and because a tool here needs the calling session's state.
"""

from __future__ import annotations

import inspect
import json
import logging
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from mcp.shared.exceptions import MCPError
from mcp.shared.tool_name_validation import validate_tool_name
from mcp_types import INVALID_PARAMS, CallToolResult, ImageContent, TextContent, Tool
from pydantic import BaseModel, PrivateAttr, ValidationError

from service.delivery.hub import DeliveryHub, DeliveryTarget
from service.domain.message import InboundMessage
from service.mcp.caller_line import CallerLine
from service.mcp.sessions import SessionState

log = logging.getLogger(__name__)

TIME_BUDGET_META_KEY = "dev.entrabot/time_budget_s"
"""A tools/call ``_meta`` key: the seconds the caller will wait for the result (sent by the bridge)."""


def time_budget_of(meta: Any) -> float | None:
    """The caller's time budget from a request's ``_meta``, when it is a positive number."""
    value = meta.get(TIME_BUDGET_META_KEY) if isinstance(meta, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


InT = TypeVar("InT", bound=BaseModel)
OutT = TypeVar("OutT", bound=BaseModel)
ToolHandler = Callable[[InT, "ToolCall"], Awaitable[OutT]]
HostNotificationHandler = Callable[[InT, "ToolCall"], Awaitable[None]]


class WithMedia(BaseModel):
    """A result that carries media (images) beside its structured content. The blocks go out as content
    after the JSON text and never into the structured content, which stays small and schema-shaped."""

    _media: list[ImageContent] = PrivateAttr(default_factory=list)

    @property
    def media(self) -> list[ImageContent]:
        return self._media

    def with_image(self, data: str, mime_type: str) -> Self:
        self._media.append(ImageContent(type="image", data=data, mime_type=mime_type))
        return self


class ToolError(Exception):
    """An expected failure: the host sees the message as the tool's error result, so say what to do."""


@dataclass(frozen=True, slots=True)
class SessionChannel:
    """The calling session's push stream, for a tool whose answer is pushed later (a permission verdict)."""

    send: Callable[[BaseModel], Awaitable[None]]
    is_open: Callable[[], bool]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """What a running tool knows about its call."""

    # None for a request with no session (MCP 2026-07-28), or when the session ended during set-up.
    session: SessionState | None
    hub: DeliveryHub
    request_id: str | int | None
    channel: SessionChannel | None = None
    # How long the host waits for this call's answer, when it says so (the channel bridge does, in the
    # request's _meta): a tool that may wait must answer well within it, never let the host time out.
    time_budget_s: float | None = None
    # Whether the host can still take this call's result (None: a call not made over HTTP, as in tests).
    caller: CallerLine | None = None
    # For a host that acknowledges: claimed messages it did not get written into its delivery record, so
    # they are pushed to it (HostKeeper.owe; False when certainly not written). None for any other host.
    owe: Callable[[Sequence[InboundMessage]], Awaitable[bool]] | None = None
    # The host this call speaks for, from its credentials (service.mcp.host_identity): whose inbox it
    # reads. None: a call not made over HTTP, or one naming a host id that is not one.
    host_id: str | None = None
    # The host as it introduced itself (client name and version, protocol era), for operators' eyes.
    host_about: dict[str, str] | None = None

    @property
    def session_id(self) -> str | None:
        return self.session.session_id if self.session is not None else None

    @property
    def push_capable(self) -> bool:
        """Whether the calling host takes channel pushes (else it needs sponsor waits)."""
        return self.session is not None and self.session.push_capable

    @asynccontextmanager
    async def holding(self, target: DeliveryTarget) -> AsyncIterator[DeliveryTarget]:
        """Keep ``target`` registered in the hub for the duration of the block.

        It is unregistered however the block ends, including when the host cancels the request (the
        SDK cancels the tool's task), so the hub never claims for a wait nobody is waiting on.
        """
        self.hub.register(target)
        try:
            yield target
        finally:
            self.hub.unregister(target.target_id)


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    name: str
    description: str | None
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    handler: ToolHandler[Any, Any]

    def definition(self) -> Tool:
        return Tool(
            name=self.name,
            description=self.description,
            input_schema=self.input_model.model_json_schema(),
            output_schema=self.output_model.model_json_schema(mode="serialization"),
        )


@dataclass(frozen=True, slots=True)
class HostNotification:
    """A notification a host's session may send the server: never listed, so no model can reach it."""

    method: str
    params_model: type[BaseModel]
    handler: HostNotificationHandler[Any]


class ToolRegistry:
    """The tools one MCP server offers, and the host notifications it handles; may be added to until
    the first host lists them."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        self._notifications: dict[str, HostNotification] = {}

    def add(
        self,
        handler: ToolHandler[Any, Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> RegisteredTool:
        tool_name = name or handler.__name__
        verdict = validate_tool_name(tool_name)
        if not verdict.is_valid:
            raise ValueError(f"tool name {tool_name!r} is not valid: {'; '.join(verdict.warnings)}")
        if tool_name in self._tools:
            raise ValueError(f"a tool named {tool_name!r} is already registered")
        input_model, output_model = _models_of(handler)
        tool = RegisteredTool(
            name=tool_name,
            description=description or inspect.getdoc(handler),
            input_model=input_model,
            output_model=output_model,
            handler=handler,
        )
        self._tools[tool_name] = tool
        return tool

    def tool(
        self, *, name: str | None = None, description: str | None = None
    ) -> Callable[[ToolHandler[InT, OutT]], ToolHandler[InT, OutT]]:
        def register(handler: ToolHandler[InT, OutT]) -> ToolHandler[InT, OutT]:
            self.add(handler, name=name, description=description)
            return handler

        return register

    def definitions(self) -> list[Tool]:
        return [tool.definition() for tool in self._tools.values()]

    def add_host_notification(self, method: str, handler: HostNotificationHandler[Any]) -> None:
        """Handle ``method`` from a host's session with ``handler(params, call)`` (params typed by its
        annotation). Unlike a tool it is not listed: a host sends it on its own, never for its model."""
        if method in self._notifications:
            raise ValueError(f"a handler for {method!r} is already registered")
        params_model, _ = _models_of(handler, returns=type(None))
        self._notifications[method] = HostNotification(method, params_model, handler)

    def handles(self, method: str) -> bool:
        return method in self._notifications

    async def notified(self, method: str, params: dict[str, Any] | None, call: ToolCall) -> None:
        """Run the handler of a host notification. A notification has no answer, so what goes wrong is
        logged (without the params: they are the host's data) and dropped."""
        entry = self._notifications.get(method)
        if entry is None:
            log.info("host notification not handled here", extra={"method": method})
            return
        try:
            args = entry.params_model.model_validate(params or {})
        except ValidationError as exc:
            problems = exc.errors(include_url=False, include_input=False, include_context=False)
            log.warning(
                "host notification refused",
                extra={"method": method, "problems": json.dumps(problems, default=str)},
            )
            return
        try:
            await entry.handler(args, call)
        except ToolError as exc:
            log.warning("host notification not acted on", extra={"method": method, "why": str(exc)})
        except Exception:
            log.exception("host notification handler raised", extra={"method": method})

    async def call(
        self, name: str, arguments: dict[str, Any] | None, call: ToolCall
    ) -> CallToolResult:
        tool = self._tools.get(name)
        if tool is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        try:
            args = tool.input_model.model_validate(arguments or {})
        except ValidationError as exc:
            # Locations and messages only: the rejected values are the host's data.
            problems = exc.errors(include_url=False, include_input=False, include_context=False)
            return _error_result(
                f"Invalid arguments for {name}: {json.dumps(problems, default=str)}"
            )
        try:
            result = await tool.handler(args, call)
        except ToolError as exc:
            return _error_result(str(exc))
        except Exception:
            log.exception("tool raised", extra={"tool": name})
            return _error_result(f"{name} failed inside the server; the error is in the server log")
        if not isinstance(result, tool.output_model):
            log.error(
                "tool returned the wrong type",
                extra={"tool": name, "returned": type(result).__name__},
            )
            return _error_result(f"{name} failed inside the server; the error is in the server log")
        structured = result.model_dump(mode="json", by_alias=True)
        media = result.media if isinstance(result, WithMedia) else []
        return CallToolResult(
            content=[
                TextContent(type="text", text=json.dumps(structured, ensure_ascii=False)),
                *media,
            ],
            structured_content=structured,
        )


def _error_result(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _models_of(
    handler: Callable[..., Awaitable[Any]], *, returns: type | None = None
) -> tuple[type[BaseModel], Any]:
    """The input and output models, read from the handler's annotations (``returns``: the one return
    type a host-notification handler may have instead of a model)."""
    where = getattr(handler, "__qualname__", repr(handler))
    if not inspect.iscoroutinefunction(handler):
        raise TypeError(f"tool {where} must be an async function")
    params = list(inspect.signature(handler).parameters)
    if len(params) != 2:
        raise TypeError(f"tool {where} must take exactly (args: <pydantic model>, call: ToolCall)")
    try:
        hints = typing.get_type_hints(handler)
    except NameError as exc:
        problem = f"tool {where}: its annotations do not resolve ({exc}); define its models at module level"
        raise TypeError(problem) from exc
    input_model, output_model = hints.get(params[0]), hints.get("return")
    if returns is not None and output_model is not returns:
        raise TypeError(f"handler {where} must return {returns!r}, got {output_model!r}")
    checked = (
        (("argument", input_model),)
        if returns is not None
        else (("argument", input_model), ("return", output_model))
    )
    for role, model in checked:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(
                f"tool {where} must annotate its {role} type with a pydantic model, got {model!r}"
            )
    return input_model, output_model  # type: ignore[return-value]
