"""Which verified Entra tokens may use /mcp: identity is not permission.

Any app in the tenant can get a client-credentials token for this API's audience, so a valid
signature, issuer, audience and lifetime only say *who* calls. Permission is an app role assigned to
the client (or to the signed-in user), or a delegated scope granted to the client, named in the
settings; an optional allow-list narrows it to known client apps.

Where Entra puts them (Microsoft identity platform, "Access token claims reference"; read, not run
here): app roles in ``roles`` (a JSON array, in app-only and in user tokens), delegated scopes in
``scp`` (one space-separated string, user tokens only), the calling client in ``azp`` (v2.0 tokens,
the only ones /mcp accepts; ``appid``, its v1.0 name, is read only as a fallback).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _names(value: str | None) -> frozenset[str]:
    return frozenset(item.strip() for item in (value or "").split(",") if item.strip())


def token_roles(claims: Mapping[str, Any]) -> tuple[str, ...]:
    roles = claims.get("roles")
    return tuple(r for r in roles if isinstance(r, str)) if isinstance(roles, list) else ()


def token_scopes(claims: Mapping[str, Any]) -> tuple[str, ...]:
    scp = claims.get("scp")
    return tuple(scp.split()) if isinstance(scp, str) else ()


def token_client_id(claims: Mapping[str, Any]) -> str | None:
    client = claims.get("azp") or claims.get("appid")
    return client if isinstance(client, str) and client else None


@dataclass(frozen=True)
class AccessPolicy:
    roles: frozenset[str]
    scopes: frozenset[str]
    client_ids: frozenset[str] = frozenset()  # empty: any client that holds a role or scope

    @classmethod
    def from_settings(
        cls, roles: str | None, scopes: str | None, client_ids: str | None
    ) -> AccessPolicy:
        return cls(_names(roles), _names(scopes), _names(client_ids))

    @property
    def grants_anything(self) -> bool:
        return bool(self.roles or self.scopes)

    def allows(self, claims: Mapping[str, Any]) -> bool:
        """True when the token's client is allowed and it carries a required role or scope."""
        if self.client_ids and token_client_id(claims) not in self.client_ids:
            return False
        return bool(
            self.roles.intersection(token_roles(claims))
            or self.scopes.intersection(token_scopes(claims))
        )

    def challenge_scope(self) -> str:
        """The ``scope`` of a 403's WWW-Authenticate (RFC 6750 §3): what would have been enough."""
        return " ".join(sorted(self.roles | self.scopes))
