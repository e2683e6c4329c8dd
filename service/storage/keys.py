"""Validation of storage keys, shared by every backend so a bad key fails the same way everywhere."""

from __future__ import annotations


class InvalidKeyError(ValueError):
    """A key that is empty, absolute, or has a ``.``, ``..`` or empty path segment."""


def validate_key(key: str) -> str:
    """Return the key unchanged when it is a safe relative forward-slash path, else raise."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        raise InvalidKeyError(f"invalid storage key {key!r}: use a relative forward-slash path")
    # Split by hand, not with PurePosixPath: it drops "." segments, so "a/./b" would pass here and
    # name one file on LocalBackend ("a/b") but a different blob on BlobBackend ("a/./b").
    if any(segment in ("", ".", "..") for segment in key.split("/")):
        raise InvalidKeyError(f"invalid storage key {key!r}: no '.', '..' or empty path segments")
    return key
