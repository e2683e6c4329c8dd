"""Graph's ``reactionType``: which values the fleet takes for the reaction it sets on a message.

Graph's chatMessageReaction (v1.0): "reactionType — Supported values include Unicode characters,
custom, and some backward-compatible reaction types, such as like, angry, sad, laugh, heart, and
surprised" (https://learn.microsoft.com/graph/api/resources/chatmessagereaction; read, not run here).
``custom`` needs a hosted content the fleet does not have, so it is refused; a Unicode value must be one
emoji-like symbol (with its joiners, variation selectors and skin tones), not text, so a typo such as
``eyes`` is refused at start-up instead of answered 400 by Graph on every acknowledgement.

A leaf: the settings validate with it, and nothing here imports the service.
"""

from __future__ import annotations

import unicodedata

NAMED = frozenset({"like", "angry", "sad", "laugh", "heart", "surprised"})
MAX_CHARS = 16  # the longest ZWJ sequences (families, flags with tags) stay well under this
# The characters an emoji sequence is built with besides its symbols: zero-width joiner, variation
# selectors, the combining keycap and tag characters (subdivision flags).
_JOINERS = frozenset({"\u200d", "\ufe0e", "\ufe0f", "\u20e3"})
_KEYCAP_BASES = frozenset("#*0123456789")


def check_reaction_type(value: str) -> str:
    """``value`` as Graph takes it, or ValueError saying what a reaction type must be."""
    if value in NAMED:
        return value
    if value.lower() in NAMED:
        raise ValueError(f"Graph's reaction names are lower case: use {value.lower()!r}")
    keycap = (
        "\u20e3" in value and value[0] in _KEYCAP_BASES
    )  # 1️⃣, #️⃣: the one emoji with no symbol in it
    if (
        len(value) > MAX_CHARS
        or not all(_emoji_part(c) or keycap and c in _KEYCAP_BASES for c in value)
        or not (keycap or any(_symbol(c) for c in value))
    ):
        raise ValueError(
            "must be one emoji (for example 👀 or ✅) or one of Graph's reaction names "
            f"({', '.join(sorted(NAMED))}); leave it empty for no reaction"
        )
    return value


def _symbol(char: str) -> bool:
    return unicodedata.category(char) == "So"


def _emoji_part(char: str) -> bool:
    # Sk: the skin-tone modifiers; the tag characters spell subdivision flags.
    return (
        _symbol(char)
        or char in _JOINERS
        or unicodedata.category(char) == "Sk"
        or "\U000e0020" <= char <= "\U000e007f"
    )
