"""What the agent posts in Teams, whichever tool posts it: the text's limits and its prefix."""

from __future__ import annotations

from service.graph.authorship import DELEGATED_PREFIX
from service.tools.deps import ToolDeps

__all__ = ["DELEGATED_PREFIX", "MAX_TEXT_CHARS", "as_posted"]
MAX_TEXT_CHARS = 28_000  # Teams refuses chat messages much over ~28 KB


def as_posted(deps: ToolDeps, text: str) -> str:
    """The text as the agent's message carries it in this auth mode."""
    return DELEGATED_PREFIX + text if deps.options.auth_mode == "delegated" else text
