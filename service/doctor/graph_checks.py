"""One harmless Graph call per permission the fleet needs, plus the sponsor read on the app-only token.

A failed check names the principal to grant to, by permission kind (docs/azure.md §2):
- delegated: to the **agent identity** (the client of the agent user's token) for the agent user, an
  oauth2PermissionGrant with clientId = the agent identity, consentType Principal, principalId = the
  agent user;
- application: to the **agent identity** itself, an appRoleAssignment on its service principal (its
  app-only token carries the role).
Neither goes to the blueprint. Read, not run (Microsoft Entra Agent ID, "Agent identities": the
blueprint "can acquire tokens on behalf of the agent identity provided the user or tenant admin
consented for the agent identity to the corresponding scopes"; "Grant application permissions to an
agent identity"). A blueprint's inheritable permissions are another route Entra offers (grants on
the blueprint principal that its agent identities inherit); docs/azure.md does not use it, so the
doctor does not point there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from service.doctor.identity_checks import IdentityChain, granted_scopes
from service.doctor.permissions import (
    DELEGATED_PERMISSIONS,
    SPONSOR_READ_PERMISSION,
    DelegatedPermission,
    Probe,
)
from service.doctor.report import Finding, fail, ok, skip
from service.graph.auth import TokenProvider
from service.graph.client import GraphClient
from service.graph.errors import GraphError, GraphForbidden, TokenAcquisitionError
from service.graph.models import DirectoryObjectRef

GraphFactory = Callable[[TokenProvider], GraphClient]
SPONSOR_CHECK = f"sponsor read (agent identity app-only, {SPONSOR_READ_PERMISSION})"


class GrantAdvice(Protocol):
    """Where a missing permission is to be granted, in words for the operator."""

    def delegated(self, permission: str) -> str: ...

    def application(self, permission: str) -> str: ...


@dataclass(frozen=True)
class Grantee:
    """Who the advice tells the operator to grant to: the configured agent identity and agent user
    (delegated mode's is ``service.doctor.sign_in_checks.SignInGrantee``)."""

    agent_identity_id: str
    agent_user: str  # UPN, else object id

    def delegated(self, permission: str) -> str:
        return (
            f"grant the delegated permission {permission} to the agent identity {self.agent_identity_id} "
            f"for the agent user {self.agent_user} (oauth2PermissionGrant: clientId = the agent identity, "
            "consentType Principal, principalId = the agent user; docs/azure.md §2)"
        )

    def application(self, permission: str) -> str:
        return (
            f"grant the application permission {permission} to the agent identity {self.agent_identity_id} "
            "itself (appRoleAssignment on its service principal, admin consent; docs/azure.md §2)"
        )


def _check_name(permission: DelegatedPermission) -> str:
    return f"graph {permission.name} ({permission.probe.value})"


def _refused(permission: DelegatedPermission, exc: GraphError, grantee: GrantAdvice) -> Finding:
    if isinstance(exc, GraphForbidden):
        return fail(
            _check_name(permission),
            f"Graph refused it (403): {grantee.delegated(permission.name)} ({permission.why})",
        )
    return fail(_check_name(permission), f"{type(exc).__name__}: {exc}")


async def check_sponsors(
    chain: IdentityChain, make_graph: GraphFactory, grantee: Grantee
) -> tuple[Finding, list[DirectoryObjectRef]]:
    check = SPONSOR_CHECK
    if chain.app_tokens is None:
        return skip(check, "not tried: the identity settings are incomplete"), []
    if chain.failed_hop == 1:
        # The app-only token starts with the same blueprint hop: its failure is already on its line.
        return skip(
            check, "not tried: identity hop 1 (blueprint) failed, and it needs that hop"
        ), []
    async with make_graph(chain.app_tokens) as graph:
        try:
            sponsors = await graph.directory.list_sponsors(grantee.agent_identity_id, max_pages=1)
        except TokenAcquisitionError as exc:
            return fail(check, str(exc)), []
        except GraphForbidden:
            return fail(
                check, f"Graph refused it (403): {grantee.application(SPONSOR_READ_PERMISSION)}"
            ), []
        except GraphError as exc:
            return fail(check, f"{type(exc).__name__}: {exc}"), []
    if not sponsors:
        return fail(
            check,
            "the agent identity has no sponsors: nobody's reply can satisfy a sponsor wait; "
            "add one (docs/azure.md, 'Sponsors')",
        ), []
    return ok(check, f"{len(sponsors)} sponsor(s)"), sponsors


class _DelegatedReads:
    """The harmless reads, in permission order; each may use what an earlier one found.

    Every read returns what it proved, or None when there was nothing to read it on.
    """

    def __init__(self, graph: GraphClient, sponsors: list[DirectoryObjectRef]) -> None:
        self._graph = graph
        self._me: str | None = None
        self._chat: str | None = None
        # Whose profile the User.ReadBasic.All check reads: a sponsor, else another member of a chat.
        self._others = [s.id for s in sponsors if s.is_user]  # a group sponsor has no user profile

    def for_probe(self, probe: Probe) -> Callable[[], Awaitable[str | None]] | None:
        reads: dict[Probe, Callable[[], Awaitable[str | None]]] = {
            Probe.ME: self.me,
            Probe.USER: self.user,
            Probe.CHATS: self.chats,
            Probe.CHAT_MEMBERS: self.members,
            Probe.CHAT_MESSAGES: self.messages,
            Probe.MAIL: self.mail,
        }
        return reads.get(probe)

    async def me(self) -> str | None:
        self._me = (await self._graph.directory.get_me()).id
        return f"signed in as {self._me}"

    async def chats(self) -> str | None:
        sweep = await self._graph.chats.list_my_chats(max_pages=1, members=False)
        self._chat = sweep.chats[0].id if sweep.chats else None
        return f"{len(sweep.chats)} chat(s) on the first page"

    async def members(self) -> str | None:
        if self._chat is None:
            return None
        found = await self._graph.chats.list_chat_members(self._chat, max_pages=1)
        self._others += [m.user_id for m in found if m.user_id and m.user_id != self._me]
        return f"{len(found)} member(s)"

    async def user(self) -> str | None:
        if not self._others:
            return None
        await self._graph.directory.get_user(self._others[0])
        return "read another user's profile"

    async def messages(self) -> str | None:
        if self._chat is None:
            return None
        await self._graph.messages.get_newest_chat_message(self._chat)
        return "read the newest message of one chat"

    async def mail(self) -> str | None:
        async for page in self._graph.mail.list_mail(None, top=1, max_pages=1):
            return f"{len(page.items)} message(s) read"
        return "inbox read"


def skip_every_graph_check(why: str) -> list[Finding]:
    return [skip(_check_name(p), why) for p in DELEGATED_PERMISSIONS]


async def check_delegated(
    chain: IdentityChain,
    make_graph: GraphFactory,
    sponsors: list[DirectoryObjectRef],
    grantee: GrantAdvice,
) -> list[Finding]:
    if chain.user_tokens is None or chain.graph_token is None:
        return [
            skip(_check_name(p), "not tried: no Graph token for the agent")
            for p in DELEGATED_PERMISSIONS
        ]
    scopes = granted_scopes(chain.graph_token)
    async with make_graph(chain.user_tokens) as graph:
        reads = _DelegatedReads(graph, sponsors)
        return [
            await _check_one(p, reads.for_probe(p.probe), scopes, grantee)
            for p in DELEGATED_PERMISSIONS
        ]


async def _check_one(
    permission: DelegatedPermission,
    read: Callable[[], Awaitable[str | None]] | None,
    scopes: frozenset[str],
    grantee: GrantAdvice,
) -> Finding:
    if read is None:
        held = scopes & permission.accepted
        if held:
            return ok(_check_name(permission), f"granted ({', '.join(sorted(held))})")
        return fail(
            _check_name(permission),
            f"the agent's token lacks {permission.name} (has: "
            f"{', '.join(sorted(scopes)) or 'none'}); {grantee.delegated(permission.name)} "
            f"({permission.why})",
        )
    try:
        proven = await read()
    except GraphError as exc:
        return _refused(permission, exc, grantee)
    if proven is None:
        return skip(
            _check_name(permission), "nothing to read it on (no chat, or nobody else in it, yet)"
        )
    return ok(_check_name(permission), proven)
