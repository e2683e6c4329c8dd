"""Refresh tokens the tenant issued, and what redeeming one does.

Microsoft identity platform, "Refresh tokens in the Microsoft identity platform" (read, not run): a
refresh token is bound to a user and a client, lasts 90 days by default, and "replaces itself with a
fresh token upon every use"; the platform "doesn't revoke old refresh tokens when used to fetch new
access tokens". An admin revoking a user's sessions revokes them all. The emulator keeps each token
opaque (random) and remembers what it stands for.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum


class Redemption(str, Enum):
    VALID = "valid"
    UNKNOWN = "unknown"
    EXPIRED = "expired"
    REVOKED = "revoked"


@dataclass(frozen=True)
class RefreshGrant:
    user_id: str
    client_id: str
    scope: str  # the scopes of the original sign-in, space-separated
    expires_at: datetime


class RefreshTokens:
    def __init__(self, lifetime_s: int) -> None:
        self.lifetime_s = lifetime_s
        self._grants: dict[str, RefreshGrant] = {}
        self._revoked: set[str] = set()
        self._redeemed = 0
        self._lock = threading.Lock()

    def issue(self, user_id: str, client_id: str, scope: str, now: datetime) -> str:
        token = "0." + secrets.token_urlsafe(64)
        with self._lock:
            self._grants[token] = RefreshGrant(
                user_id, client_id, scope, now + timedelta(seconds=self.lifetime_s)
            )
        return token

    def redeem(self, token: str, now: datetime) -> tuple[Redemption, RefreshGrant | None]:
        with self._lock:
            grant = self._grants.get(token)
            if grant is None:
                return Redemption.UNKNOWN, None
            if token in self._revoked:
                return Redemption.REVOKED, grant
            if now >= grant.expires_at:
                return Redemption.EXPIRED, grant
            self._redeemed += 1
            return Redemption.VALID, grant

    @property
    def redeemed(self) -> int:
        """How many redemptions succeeded: what a test counts to see how often a fleet refreshed."""
        with self._lock:
            return self._redeemed

    def revoke(
        self, *, everything: bool = False, user_id: str | None = None, app_id: str | None = None
    ) -> int:
        with self._lock:
            hits = [
                t
                for t, g in self._grants.items()
                if everything or g.user_id == user_id or g.client_id == app_id
            ]
            new = [t for t in hits if t not in self._revoked]
            self._revoked.update(new)
            return len(new)
