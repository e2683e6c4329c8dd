"""Sealing the sign-in record: AES-256-GCM under a key the container never holds.

The record holds a refresh token, a credential for the signed-in person's chats and mail for up to 90
days, and it lives in the shared container, which every holder of a storage role on it can read. So
it is stored sealed: authenticated encryption (AES-GCM, from ``cryptography``) under
``ENTRABOT_DELEGATED_TOKEN_KEY``, a 32-byte key kept where the replicas' other secrets are (a
Kubernetes Secret). The blob key is the associated data, so a sealed value copied to another key does
not open. The envelope names the key by a fingerprint (never the key), so a replica given another key
says so instead of calling the record corrupt.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from enum import Enum

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
FORMAT = "entrabot-sealed-v1"
_NONCE_BYTES = 12  # GCM's standard nonce; random per seal (a record is sealed a few times an hour)
KEY_ADVICE = "32 random bytes in base64, e.g. the output of `openssl rand -base64 32`"


class SealProblem(str, Enum):
    WRONG_KEY = "wrong_key"  # sealed under another key
    CORRUPT = "corrupt"  # not an envelope, or it fails authentication


class SealError(Exception):
    def __init__(self, problem: SealProblem, message: str) -> None:
        super().__init__(message)
        self.problem = problem


def decode_key(text: str) -> bytes:
    """The key's bytes from its setting (standard or URL-safe base64); ValueError says what it must be."""
    cleaned = "".join(text.split())
    try:
        raw = base64.b64decode(
            cleaned.replace("-", "+").replace("_", "/") + "=" * (-len(cleaned) % 4), validate=True
        )
    except (binascii.Error, ValueError):
        raise ValueError(f"is not base64; it must be {KEY_ADVICE}") from None
    if len(raw) != KEY_BYTES:
        raise ValueError(f"decodes to {len(raw)} bytes; it must be {KEY_ADVICE}")
    return raw


class SealingKey:
    def __init__(self, raw: bytes) -> None:
        if len(raw) != KEY_BYTES:
            raise ValueError(f"a sealing key is {KEY_BYTES} bytes")
        self._aead = AESGCM(raw)
        # A fingerprint to tell keys apart in the envelope and in messages; it reveals nothing of the key.
        self.key_id = hashlib.sha256(b"entrabot-fleet sealing key id\0" + raw).hexdigest()[:16]

    @classmethod
    def from_setting(cls, text: str) -> SealingKey:
        return cls(decode_key(text))

    def __repr__(self) -> str:
        return f"SealingKey(key_id={self.key_id})"

    def seal(self, plaintext: bytes, *, bound_to: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext, bound_to.encode())
        return json.dumps(
            {"format": FORMAT, "key_id": self.key_id, "nonce": _b64(nonce), "sealed": _b64(sealed)},
            sort_keys=True,
        )

    def open(self, envelope: str, *, bound_to: str) -> bytes:
        try:
            obj = json.loads(envelope)
            fmt, key_id, nonce, sealed = obj["format"], obj["key_id"], obj["nonce"], obj["sealed"]
        except (ValueError, KeyError, TypeError):
            raise SealError(SealProblem.CORRUPT, "not a sealed record") from None
        if fmt != FORMAT:
            raise SealError(SealProblem.CORRUPT, f"sealed in an unknown format {str(fmt)[:40]!r}")
        if key_id != self.key_id:
            raise SealError(
                SealProblem.WRONG_KEY,
                f"sealed under key {str(key_id)[:16]}, not this key {self.key_id}",
            )
        try:
            return self._aead.decrypt(
                base64.b64decode(nonce), base64.b64decode(sealed), bound_to.encode()
            )
        except (InvalidTag, binascii.Error, ValueError, TypeError):
            raise SealError(
                SealProblem.CORRUPT,
                "fails authentication: altered, truncated or copied from another key",
            ) from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
