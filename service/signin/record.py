"""The sign-in record: who signed in, their refresh token, and the access tokens the fleet shares.

Pure: parse, render, and the two rules every replica applies to it (is a token fresh enough to use;
what a refresh makes of the record). One record per container, sealed at rest (``sealing``), under
``SIGN_IN_KEY``. The access tokens are shared too, so a fleet of ten refreshes once an hour, not ten
times. ``generation`` counts sign-ins (``entrabot-fleet signin`` starts the next one), ``refreshes``
the refreshes since; neither is a secret, and both show in ``doctor``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from service.clock import format_timestamp
from service.ledger.records.fields import load_object, optional_str, require_str, require_timestamp
from service.ledger.records.reads import CorruptValueError

SIGN_IN_KEY = "auth/signed_in.json"
_WHAT = "sign-in record"


@dataclass(frozen=True)
class SignedInPerson:
    object_id: str
    upn: str | None = None
    display_name: str | None = None

    def describe(self) -> str:
        name = self.display_name or self.upn or self.object_id
        return f"{name} ({self.upn})" if self.upn and self.display_name else name


@dataclass(frozen=True)
class CachedToken:
    token: str = field(repr=False)
    expires_on: float  # seconds since the epoch
    obtained_at: float  # when it was asked for

    def use_until(self, margin_s: float) -> float:
        """Refreshed ``margin_s`` before expiry, but never later than half-way through its life: a token
        shorter-lived than the margin would otherwise be refreshed on every call (the agent-user rule)."""
        return self.expires_on - min(margin_s, max(0.0, self.expires_on - self.obtained_at) / 2)


@dataclass(frozen=True)
class SignInRecord:
    tenant_id: str
    client_id: str  # the app registration the person signed in to
    person: SignedInPerson
    refresh_token: str = field(repr=False)
    scope: str  # what was asked at sign-in (space-separated); a refresh asks the same
    signed_in_at: datetime
    refreshed_at: datetime
    refreshed_by: str  # the replica (or "signin") that wrote the tokens
    generation: int = 1
    refreshes: int = 0
    access_tokens: Mapping[str, CachedToken] = field(default_factory=dict, repr=False)

    def fresh_token(self, scope: str, *, now: float, margin_s: float) -> CachedToken | None:
        """The shared token for ``scope`` while it is not yet due for a refresh, else None."""
        token = self.access_tokens.get(scope)
        return token if token is not None and now < token.use_until(margin_s) else None

    def refreshed(
        self, scope: str, token: CachedToken, refresh_token: str | None, *, at: datetime, by: str
    ) -> SignInRecord:
        """The record after a refresh: the new token, and the new refresh token (Entra hands out a fresh
        one on every use; without one, the old one stays)."""
        return replace(
            self,
            access_tokens={**self.access_tokens, scope: token},
            refresh_token=refresh_token or self.refresh_token,
            refreshed_at=at,
            refreshed_by=by,
            refreshes=self.refreshes + 1,
        )


def render_record(record: SignInRecord) -> str:
    return json.dumps(
        {
            "tenant_id": record.tenant_id,
            "client_id": record.client_id,
            "person": {
                "object_id": record.person.object_id,
                "upn": record.person.upn,
                "display_name": record.person.display_name,
            },
            "refresh_token": record.refresh_token,
            "scope": record.scope,
            "signed_in_at": format_timestamp(record.signed_in_at),
            "refreshed_at": format_timestamp(record.refreshed_at),
            "refreshed_by": record.refreshed_by,
            "generation": record.generation,
            "refreshes": record.refreshes,
            "access_tokens": {
                scope: {"token": t.token, "expires_on": t.expires_on, "obtained_at": t.obtained_at}
                for scope, t in sorted(record.access_tokens.items())
            },
        },
        sort_keys=True,
    )


def parse_record(text: str) -> SignInRecord:
    """The record; CorruptValueError names the field, never a value (they are secrets)."""
    obj = load_object(text, _WHAT)
    person = obj.get("person")
    if not isinstance(person, dict):
        raise CorruptValueError(f"{_WHAT}: field 'person' must be an object")
    return SignInRecord(
        tenant_id=require_str(obj, "tenant_id", _WHAT),
        client_id=require_str(obj, "client_id", _WHAT),
        person=SignedInPerson(
            require_str(person, "object_id", _WHAT),
            optional_str(person, "upn", _WHAT),
            optional_str(person, "display_name", _WHAT),
        ),
        refresh_token=require_str(obj, "refresh_token", _WHAT),
        scope=require_str(obj, "scope", _WHAT),
        signed_in_at=require_timestamp(obj, "signed_in_at", _WHAT),
        refreshed_at=require_timestamp(obj, "refreshed_at", _WHAT),
        refreshed_by=require_str(obj, "refreshed_by", _WHAT),
        generation=_count(obj, "generation", minimum=1),
        refreshes=_count(obj, "refreshes", minimum=0),
        access_tokens=_tokens(obj.get("access_tokens", {})),
    )


def _count(obj: Mapping[str, object], name: str, *, minimum: int) -> int:
    value = obj.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise CorruptValueError(f"{_WHAT}: field {name!r} must be an integer of at least {minimum}")
    return value


def _tokens(value: object) -> dict[str, CachedToken]:
    if not isinstance(value, dict):
        raise CorruptValueError(f"{_WHAT}: field 'access_tokens' must be an object")
    tokens: dict[str, CachedToken] = {}
    for scope, entry in value.items():
        token = entry.get("token") if isinstance(entry, dict) else None
        times = [
            entry.get(name) if isinstance(entry, dict) else None
            for name in ("expires_on", "obtained_at")
        ]
        if not isinstance(token, str) or not token or not all(_number(t) for t in times):
            raise CorruptValueError(
                f"{_WHAT}: field 'access_tokens': the token for {scope!r} must have a "
                "token, expires_on and obtained_at"
            )
        expires_on, obtained_at = (float(t) for t in times if isinstance(t, (int, float)))
        tokens[scope] = CachedToken(token, expires_on, obtained_at)
    return tokens


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
