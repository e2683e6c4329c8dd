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


def area_of(key: str | None) -> str:
    """The part of the store a key (or a listing's prefix) belongs to, for metrics: its first path
    segment. The fleet's keys put every chat, host or user id below a fixed first segment, and its few
    top-level blobs have fixed names, so the label's values stay a short, fixed set."""
    if not key:
        return "container"
    return key.split("/", 1)[0]
