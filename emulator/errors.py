"""Errors in the two shapes the real services answer with: Graph's ``{"error": {...}}`` and Entra's
OAuth error object with an AADSTS code. Routes raise them; app.py renders them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from emulator.timestamps import inner_error_date


@dataclass
class GraphError(Exception):
    status: int
    code: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


def graph_error_body(
    code: str, message: str, *, request_id: str, client_request_id: str, now: datetime
) -> dict[str, object]:
    return {
        "error": {
            "code": code,
            "message": message,
            "innerError": {
                "date": inner_error_date(now),
                "request-id": request_id,
                "client-request-id": client_request_id,
            },
        }
    }


def bad_request(message: str, code: str = "BadRequest") -> GraphError:
    return GraphError(400, code, message)


def not_found(message: str, code: str = "NotFound") -> GraphError:
    return GraphError(404, code, message)


def forbidden(message: str, code: str = "Forbidden") -> GraphError:
    return GraphError(403, code, message)


def unauthenticated(message: str) -> GraphError:
    return GraphError(
        401,
        "InvalidAuthenticationToken",
        message,
        {
            "WWW-Authenticate": 'Bearer realm="", authorization_uri="https://login.microsoftonline.com/common/'
            'oauth2/authorize", client_id="00000003-0000-0000-c000-000000000000"',
        },
    )


def too_many_requests(retry_after_s: float) -> GraphError:
    # Delay-seconds, fractional when the wait is (the service's client parses up to microseconds).
    text = f"{retry_after_s:.3f}".rstrip("0").rstrip(".") or "0"
    return GraphError(
        429,
        "TooManyRequests",
        "Too many requests. Please retry after the time the Retry-After header names.",
        {"Retry-After": text},
    )


# Entra answers invalid_client with 401 and every other OAuth error with 400.
_ENTRA_STATUS = {"invalid_client": 401}


@dataclass
class EntraError(Exception):
    error: str  # invalid_request | invalid_client | invalid_grant | unauthorized_client | invalid_scope | ...
    code: int  # the AADSTS number
    description: str  # without the "AADSTSnnn: " prefix and trace trailer

    @property
    def status(self) -> int:
        return _ENTRA_STATUS.get(self.error, 400)

    def __str__(self) -> str:
        return f"{self.error} AADSTS{self.code}: {self.description}"


def required_param(params: Mapping[str, str], name: str) -> str:
    """A form field the token endpoint cannot do without, or Entra's error for its absence."""
    value = params.get(name)
    if not value:
        raise EntraError(
            "invalid_request",
            900144,
            f"The request body must contain the following parameter: '{name}'.",
        )
    return value


def entra_error_body(
    err: EntraError, *, now: datetime, authority: str, correlation_id: str | None
) -> dict[str, object]:
    trace_id = str(uuid.uuid4())
    correlation = correlation_id or str(uuid.uuid4())
    stamp = now.strftime("%Y-%m-%d %H:%M:%SZ")
    return {
        "error": err.error,
        "error_description": (
            f"AADSTS{err.code}: {err.description} Trace ID: {trace_id} "
            f"Correlation ID: {correlation} Timestamp: {stamp}"
        ),
        "error_codes": [err.code],
        "timestamp": stamp,
        "trace_id": trace_id,
        "correlation_id": correlation,
        "error_uri": f"{authority}/error?code={err.code}",
    }
