"""People as the tools name and show them: a user looked up by UPN or object id, and names made safe.

Display names, topics and addresses are chosen by people, so what a result shows outside an envelope
goes through ``meta_value`` (no bracket, quote or envelope word left in it).
"""

from __future__ import annotations

from service.delivery.push import meta_value
from service.graph.client import GraphClient
from service.graph.errors import GraphError, GraphNotFound
from service.graph.models import User
from service.mcp.tool_registry import ToolError
from service.tools.graph_failures import graph_tool_error


def meta_or_none(text: str | None) -> str | None:
    """A name or topic someone chose, made safe to show outside an envelope."""
    return meta_value(text) if text else None


async def look_up_user(graph: GraphClient, ref: str) -> User:
    """The tenant's user with this UPN or object id; a ToolError saying what to check otherwise."""
    try:
        return await graph.directory.get_user(ref)
    except GraphNotFound:
        raise ToolError(f"No user {ref!r} in the tenant; check the UPN or object id.") from None
    except GraphError as exc:
        raise graph_tool_error(exc, f"looking up user {ref}") from None
