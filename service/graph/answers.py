"""Reading Graph's answers: a JSON body, one item, or the error an unsuccessful answer stands for."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from service.graph.errors import (
    GraphAuthError,
    GraphBadRequest,
    GraphError,
    GraphForbidden,
    GraphNotFound,
    GraphPayloadError,
    GraphServerError,
    GraphThrottled,
)
from service.graph.pages import parse_item
from service.telemetry.metrics import GraphMetrics

T = TypeVar("T", bound=BaseModel)


def answer_json(response: httpx.Response, route: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise GraphPayloadError(
            f"Graph answered {route} with HTTP {response.status_code} but no JSON body; nothing was read",
            status=response.status_code,
            request_id=response.headers.get("request-id"),
        ) from None


def answer_item(
    response: httpx.Response, model: type[T], *, kind: str, route: str, metrics: GraphMetrics
) -> T:
    item = parse_item(answer_json(response, route), model, kind=kind, metrics=metrics)
    if item is None:
        done = (
            ""
            if response.request.method == "GET"
            else " (the request itself succeeded; do not repeat it)"
        )
        raise GraphPayloadError(
            f"Graph's answer on {route} is not a readable {kind}{done}",
            status=response.status_code,
            request_id=response.headers.get("request-id"),
        )
    return item


def _graph_error_fields(response: httpx.Response) -> tuple[str | None, str | None, str | None]:
    """(code, message, request id) from Graph's {"error": {"code", "message", "innerError"}}."""
    try:
        body = response.json()
    except ValueError:
        body = None
    raw_error = body.get("error") if isinstance(body, dict) else None
    error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
    code = error.get("code") if isinstance(error.get("code"), str) else None
    message = error.get("message") if isinstance(error.get("message"), str) else None
    raw_inner = error.get("innerError")
    inner: dict[str, Any] = raw_inner if isinstance(raw_inner, dict) else {}
    request_id = response.headers.get("request-id") or inner.get("request-id")
    return (
        code,
        (message[:200] if message else None),
        request_id if isinstance(request_id, str) else None,
    )


def error_for(
    response: httpx.Response, method: str, route: str, retry_after: float | None, idempotent: bool
) -> GraphError:
    status = response.status_code
    code, message, request_id = _graph_error_fields(response)
    said = f" ({code}: {message})" if code or message else ""
    what = f"Graph {method} {route} answered {status}{said}"
    fields: dict[str, Any] = {"status": status, "code": code, "request_id": request_id}
    if status == 400:
        return GraphBadRequest(
            f"{what}; the request does not fit this endpoint, repeating it will not help", **fields
        )
    if status == 401:
        return GraphAuthError(
            f"{what} even with a fresh token; check that the agent user is enabled and licensed and that "
            "the Graph permissions are consented for its agent identity",
            **fields,
        )
    if status == 403:
        return GraphForbidden(
            f"{what}; the agent user lacks the permission or the membership this needs", **fields
        )
    if status == 404:
        return GraphNotFound(f"{what}; it does not exist or the agent user cannot see it", **fields)
    if status == 429:
        wait = f"wait {retry_after:.0f} s" if retry_after is not None else "back off"
        return GraphThrottled(
            f"{what}: throttled; {wait} before calling again", retry_after=retry_after, **fields
        )
    if status >= 500:
        unknown = not idempotent
        tail = (
            "; it may have been carried out, do not repeat it blindly"
            if unknown
            else " after retries"
        )
        return GraphServerError(f"{what}{tail}", outcome_unknown=unknown, **fields)
    return GraphError(what, **fields)
