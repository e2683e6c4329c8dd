"""Errors raised by the Graph client and the agent-user token flow.

Callers branch on these types, never on httpx exceptions or status codes. Every message says what
happened and what to do next, and never carries a token, a secret, an assertion or a message body.
"""

from __future__ import annotations


class GraphError(Exception):
    """A failure reaching or using Microsoft Graph or the Entra token endpoint.

    ``status`` is the HTTP status (None when no response arrived), ``code`` Graph's error code or
    Entra's AADSTS code, ``request_id`` Graph's request id for a support ticket.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.request_id = request_id


class GraphBadRequest(GraphError):
    """400: the request itself is wrong (a bad id, an unsupported query); retrying cannot help."""


class GraphAuthError(GraphError):
    """401 even after the token was refreshed once: the agent user's token is not accepted."""


class GraphForbidden(GraphError):
    """403: the agent user lacks a permission or is not a member of the resource."""


class GraphNotFound(GraphError):
    """404: the chat, message, mail or user does not exist (or is invisible to the agent user)."""


class GraphThrottled(GraphError):
    """429 after the bounded retries, or a Retry-After longer than the client may wait.

    ``retry_after`` is what the server asked for, in seconds; the caller schedules its next attempt
    no earlier than that.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None,
        status: int | None = 429,
        code: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, status=status, code=code, request_id=request_id)
        self.retry_after = retry_after


class GraphUnavailable(GraphError):
    """Graph did not complete the call: a 5xx, or no answer at all. Transient; try again later.

    ``outcome_unknown`` is True for a POST that may have been carried out before it failed: the
    caller must not assume nothing happened (a re-sent chat message could post twice).
    """

    def __init__(
        self,
        message: str,
        *,
        outcome_unknown: bool = False,
        status: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, status=status, code=code, request_id=request_id)
        self.outcome_unknown = outcome_unknown


class GraphServerError(GraphUnavailable):
    """5xx after the bounded retries (GET), or at once (a POST is never blindly re-sent)."""


class GraphConnectionError(GraphUnavailable):
    """No usable response: connection refused or reset, or a timeout."""


class GraphPayloadError(GraphError):
    """A response that cannot be read as what was asked for: not JSON, a malformed page envelope,
    or an ``@odata.nextLink`` that points away from the configured Graph host."""


HOP_NAMES = {1: "blueprint", 2: "agent identity", 3: "agent user"}


class TokenAcquisitionError(GraphError):
    """One hop of the three-hop agent-user token flow failed.

    ``hop`` is 1 (blueprint), 2 (agent identity) or 3 (agent user); ``code`` the AADSTS code when
    Entra sent one; ``description`` Entra's own words (with anything we sent redacted).
    """

    def __init__(
        self,
        hop: int,
        reason: str,
        *,
        description: str | None = None,
        status: int | None = None,
        code: str | None = None,
        advice: str = "",
    ) -> None:
        self.hop = hop
        self.hop_name = HOP_NAMES[hop]
        self.description = description
        detail = (f"{code}: {description}" if code and description else (description or "")).rstrip(
            ". "
        )
        message = f"token hop {hop} ({self.hop_name}) failed: {reason}"
        if detail:
            message += f" — Entra says {detail}"
        if advice:
            message += f". {advice}"
        super().__init__(message, status=status, code=code)


class TokenConfigurationError(ValueError):
    """The settings cannot build a token provider; the message names the ENTRABOT_* variable to set."""
