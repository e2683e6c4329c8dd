"""Graph failures as tool errors: what happened, in the model's terms, and what to do about it.

The Graph client's own messages already say what to do and never carry a token or a body, so they
are passed on after a first sentence in the tool's words.
"""

from __future__ import annotations

import logging

from service.graph.errors import (
    GraphAuthError,
    GraphError,
    GraphForbidden,
    GraphNotFound,
    GraphThrottled,
    GraphUnavailable,
    TokenAcquisitionError,
)
from service.mcp.tool_registry import ToolError

log = logging.getLogger(__name__)


def graph_tool_error(exc: GraphError, doing: str) -> ToolError:
    """The ToolError for a Graph failure while ``doing`` (e.g. "reading chat 19:..."), and one log line."""
    log.warning(
        "graph call failed in a tool",
        extra={"error": type(exc).__name__, "status": exc.status, "request_id": exc.request_id},
    )
    if isinstance(exc, GraphThrottled):
        wait = f"{exc.retry_after:.0f} s" if exc.retry_after is not None else "a minute"
        return ToolError(
            f"Microsoft Graph is throttling the agent while {doing}; nothing was done. "
            f"Wait {wait} and try again."
        )
    if isinstance(exc, GraphNotFound):
        return ToolError(
            f"Not found while {doing}: it does not exist or the agent user cannot see it. ({exc})"
        )
    if isinstance(exc, GraphForbidden):
        return ToolError(
            f"Forbidden while {doing}: the agent user is not a member or lacks the permission. ({exc})"
        )
    if isinstance(exc, TokenAcquisitionError | GraphAuthError):
        return ToolError(
            f"Signing in as the agent user failed while {doing}; an operator must check the agent "
            f"identity's credentials and consent. ({exc})"
        )
    if isinstance(exc, GraphUnavailable):
        return ToolError(
            f"Microsoft Graph did not complete the call while {doing}; try again in a minute. ({exc})"
        )
    return ToolError(f"Microsoft Graph refused the call while {doing}. ({exc})")
