"""What a tool call answered, read the way the tests read it."""

from __future__ import annotations

from mcp_types import CallToolResult, TextContent


def result_text(result: CallToolResult) -> str:
    """The text of the result's first content block: the tool registry answers with text only."""
    block = result.content[0]
    assert isinstance(block, TextContent), f"a {type(block).__name__} where text was expected"
    return block.text
