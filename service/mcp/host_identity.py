"""Which host a request speaks for, decided from its credentials (SPEC §11).

A host's delivery record (what it is owed, what it acknowledged) is found by its host name, so the
name must come from what the host proved, not from what it says:

* a static token (``ENTRABOT_MCP_STATIC_TOKENS``) is named by position in ``ENTRABOT_MCP_TOKEN_HOSTS``
  (``laptop,ci-agent``), or ``token-<n>`` when several tokens are set and none is named;
* an Entra principal is named by ``ENTRABOT_MCP_PRINCIPAL_HOSTS`` (``<object id>=<name>,…``), or
  ``entra-<object id>`` (``entra-app-<client id>`` for a token with no object id).

A request may name a sub-host in ``X-Entrabot-Host-Id`` (the channel bridge does: one per project
folder): it becomes ``<name>:<sub-host>``, so it stays inside what its credential owns, and one
credential's hosts can neither drain nor acknowledge another's record.

One case keeps the header as the name: a single static token nobody named, or no auth at all
(loopback only). Everyone holding that token is one party, and the bridge's host ids from before
hosts were named keep their records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from service.mcp.acknowledging import valid_host_id

SHARED_DEFAULT = "default"  # a host on a shared credential that named no sub-host
_STATIC_PREFIX = "static-token-"  # verifiers.StaticTokenVerifier's principal client id


class HostNamesError(ValueError):
    """The host-name settings do not fit the credentials; the message says what to fix."""


@dataclass(frozen=True)
class HostNames:
    static: tuple[str, ...] = ()  # a name per static token, by position; () when none is named
    static_count: int = 0
    principals: Mapping[str, str] = field(default_factory=dict)  # Entra object id -> name

    @property
    def shared(self) -> bool:
        """One unnamed static token (or no auth): the header names the host as it always did."""
        return not self.static and self.static_count <= 1

    def host_of(self, client_id: str | None, subject: str | None, header: str | None) -> str | None:
        """The host name for a request of this principal naming ``header``; None when the header is
        not a host id (the request then acknowledges nothing)."""
        sub = valid_host_id(header) if header is not None else None
        if header is not None and sub is None:
            return None
        base = self._base(client_id, subject)
        if base is None:
            return sub or SHARED_DEFAULT
        if sub is None or sub == base or sub.startswith(f"{base}:"):
            return sub or base
        return valid_host_id(f"{base}:{sub}")

    def _base(self, client_id: str | None, subject: str | None) -> str | None:
        if client_id is None:
            return None  # no auth configured: loopback only
        if client_id.startswith(_STATIC_PREFIX) and client_id[len(_STATIC_PREFIX) :].isdigit():
            if self.shared:
                return None
            index = int(client_id[len(_STATIC_PREFIX) :])
            return self.static[index] if self.static else f"token-{index + 1}"
        if subject:
            return self.principals.get(subject) or f"entra-{subject}"
        return f"entra-app-{client_id}"


def parse_host_names(token_hosts: str, principal_hosts: str, *, static_count: int) -> HostNames:
    """From ``ENTRABOT_MCP_TOKEN_HOSTS`` and ``ENTRABOT_MCP_PRINCIPAL_HOSTS``."""
    static = _names(token_hosts)
    if static and len(static) != static_count:
        raise HostNamesError(
            f"ENTRABOT_MCP_TOKEN_HOSTS names {len(static)} host(s) for {static_count} static "
            "token(s); give one name per token of ENTRABOT_MCP_STATIC_TOKENS, in the same order"
        )
    principals: dict[str, str] = {}
    for pair in _names(principal_hosts, check=False):
        oid, sep, name = pair.partition("=")
        if not sep or not oid.strip() or valid_host_id(name.strip()) != name.strip():
            raise HostNamesError(
                f"ENTRABOT_MCP_PRINCIPAL_HOSTS: {pair!r} is not <object id>=<host name>; host names "
                "use letters, digits and ._:~- (at most 128)"
            )
        principals[oid.strip()] = name.strip()
    _unique([*static, *principals.values()])
    return HostNames(static=tuple(static), static_count=static_count, principals=principals)


def _names(value: str, *, check: bool = True) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    for name in names if check else ():
        if valid_host_id(name) != name:
            raise HostNamesError(
                f"ENTRABOT_MCP_TOKEN_HOSTS: {name!r} is not a host name; use letters, digits and "
                "._:~- (at most 128)"
            )
    return names


def _unique(names: Sequence[str]) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise HostNamesError(
                f"host name {name!r} is given twice (ENTRABOT_MCP_TOKEN_HOSTS, "
                "ENTRABOT_MCP_PRINCIPAL_HOSTS); two credentials with one name would share a record"
            )
        seen.add(name)
