"""Validation of storage keys, shared by every backend so a bad key fails the same way everywhere."""

from __future__ import annotations

from pathlib import PurePosixPath


class InvalidKeyError(ValueError):
    """A key that is empty, absolute, or escapes its root with ``..``."""


def validate_key(key: str) -> str:
    """Return the key unchanged when it is a safe relative forward-slash path, else raise."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        raise InvalidKeyError(f"invalid storage key {key!r}: use a relative forward-slash path")
    parts = PurePosixPath(key).parts
    if any(part in ("..", ".") for part in parts) or key.endswith("/") or "//" in key:
        raise InvalidKeyError(f"invalid storage key {key!r}: no '.', '..' or empty path segments")
    return key
