"""How two directory identifiers (UPNs, mail addresses, object ids) are compared.

Entra compares them case-insensitively. Only ASCII is folded: full Unicode case folding would turn
look-alikes into real letters (the Kelvin sign "K" lower-cases to "k"), letting a crafted address
equal a real one.
"""

from __future__ import annotations

import string

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def normalise_identifier(value: str | None) -> str | None:
    """The comparable form of an identifier, or None when there is none."""
    if value is None:
        return None
    return value.strip().translate(_ASCII_LOWER) or None


def same_identifier(a: str | None, b: str | None) -> bool:
    """Whether two identifiers name the same thing; an absent one equals nothing."""
    na = normalise_identifier(a)
    return na is not None and na == normalise_identifier(b)
