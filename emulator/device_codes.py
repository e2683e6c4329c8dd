"""Pending device authorizations: the state behind Entra's device authorization grant.

Microsoft identity platform, "OAuth 2.0 device authorization grant" (read, not run against Entra): a
public client POSTs ``/{tenant}/oauth2/v2.0/devicecode`` with ``client_id`` and ``scope`` and gets a
``device_code``, a short ``user_code``, a ``verification_uri``, ``expires_in`` (900 s by default) and
an ``interval``; it then polls the token endpoint with grant_type
``urn:ietf:params:oauth:grant-type:device_code`` and is told ``authorization_pending`` until the person
signs in, ``authorization_declined`` if they refuse, ``expired_token`` once ``expires_in`` has passed,
and ``bad_verification_code`` for a code the server does not know. Here nobody opens a browser: the
admin API approves (or declines) a pending code as a seeded person.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum

# Entra's user codes are short, upper-case and unambiguous to type; these letters avoid 0/O and 1/I.
_USER_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
_USER_CODE_LENGTH = 9


class Standing(str, Enum):
    PENDING = "pending"
    APPROVED = "approved"
    DECLINED = "declined"
    EXPIRED = "expired"
    REDEEMED = "redeemed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class DeviceAuthorization:
    device_code: str
    user_code: str
    client_id: str
    scope: str  # as the client asked, space-separated
    expires_at: datetime
    user_id: str | None = None  # who approved it
    declined: bool = False
    redeemed: bool = False

    def standing(self, now: datetime) -> Standing:
        if self.redeemed:
            return Standing.REDEEMED
        if self.declined:
            return Standing.DECLINED
        if now >= self.expires_at:
            return Standing.EXPIRED
        return Standing.APPROVED if self.user_id is not None else Standing.PENDING


class DeviceAuthorizations:
    """Every device authorization this tenant handed out; safe to use from the test thread too."""

    def __init__(self, lifetime_s: int, interval_s: int) -> None:
        self.lifetime_s = lifetime_s
        self.interval_s = interval_s
        self._by_device: dict[str, DeviceAuthorization] = {}
        self._lock = threading.Lock()

    def start(self, client_id: str, scope: str, now: datetime) -> DeviceAuthorization:
        pending = DeviceAuthorization(
            device_code=secrets.token_urlsafe(48),
            user_code="".join(
                secrets.choice(_USER_CODE_ALPHABET) for _ in range(_USER_CODE_LENGTH)
            ),
            client_id=client_id,
            scope=scope,
            expires_at=now + timedelta(seconds=self.lifetime_s),
        )
        with self._lock:
            self._by_device[pending.device_code] = pending
        return pending

    def decide(
        self, user_code: str, now: datetime, *, user_id: str | None, declined: bool = False
    ) -> DeviceAuthorization:
        """What the person did at the verification page; LookupError when no pending code has this user code."""
        wanted = user_code.strip().upper()
        with self._lock:
            found = next(
                (
                    a
                    for a in self._by_device.values()
                    if a.user_code == wanted and a.standing(now) is Standing.PENDING
                ),
                None,
            )
            if found is None:
                raise LookupError(f"no pending device code has the user code {user_code!r}")
            decided = replace(found, user_id=user_id, declined=declined)
            self._by_device[found.device_code] = decided
            return decided

    def redeem(
        self, device_code: str, now: datetime
    ) -> tuple[Standing, DeviceAuthorization | None]:
        """The code's standing; an approved code is marked redeemed (it yields tokens once)."""
        with self._lock:
            found = self._by_device.get(device_code)
            if found is None:
                return Standing.UNKNOWN, None
            standing = found.standing(now)
            if standing is Standing.APPROVED:
                self._by_device[device_code] = replace(found, redeemed=True)
            return standing, found

    def listed(self, now: datetime) -> list[DeviceAuthorization]:
        with self._lock:
            return [a for a in self._by_device.values() if a.standing(now) is not Standing.EXPIRED]
