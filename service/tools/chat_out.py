"""What the agent posts in Teams, whichever tool posts it: the text's limits and its prefix."""

from __future__ import annotations

from service.tools.deps import ToolDeps

# Delegated mode posts as the signed-in human; the prefix tells people which messages the agent wrote.
DELEGATED_PREFIX = "[EntraBot] "
MAX_TEXT_CHARS = 28_000  # Teams refuses chat messages much over ~28 KB


def as_posted(deps: ToolDeps, text: str) -> str:
    """The text as the agent's message carries it in this auth mode."""
    return DELEGATED_PREFIX + text if deps.settings.auth_mode == "delegated" else text
