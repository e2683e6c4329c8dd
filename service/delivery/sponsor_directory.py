"""Reading the agent identity's sponsors the way Graph allows.

Graph's "List agentIdentity sponsors" (``GET /servicePrincipals/{id}/microsoft.graph.agentIdentity/
sponsors``) documents one permission, the application permission ``AgentIdentity.ReadWrite.All``;
delegated tokens are not supported. It answers with directoryObject references; its v1.0 page shows
only a ``directoryObject`` example, and Microsoft's own entrabot code notes that the list "returns only
id regardless of $select" — so a reference may come with an ``@odata.type`` or with an id alone (read,
not run against a real tenant). The list is read with the agent identity's own app-only token (hop 2 of
the chain, asked for Graph); each reference is resolved once with the agent user's token through
``GET /users/{id}`` (User.ReadBasic.All): a user answers with the UPN and mail that let the gate
recognise a sponsor's other accounts; a group or service principal id is not a user, and Graph answers
404 (read, not run). ``GET /directoryObjects/{id}`` would name any type, but documents only
Directory.Read.All, which the agent user is not granted.

A resolved reference is kept for the process's life (an object id never changes type, and a user's UPN
and mail seldom change): a steady refresh costs one list request. An unresolved one (any answer but
a user or a 404) is not a sponsor this time and is asked again at the next refresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum

from service.domain.sponsors import Sponsor
from service.graph.client import GraphClient
from service.graph.errors import GraphError, GraphNotFound
from service.graph.models import DirectoryObjectRef

log = logging.getLogger(__name__)

USER_TYPE = "#microsoft.graph.user"


class NotAUser(Enum):
    """A reference resolved to something other than a user (a group, a service principal): not a sponsor."""

    RESOLVED = "not_a_user"


@dataclass
class SponsorResolutions:
    """What each sponsor reference turned out to be, kept across refreshes (one process's, no I/O)."""

    by_id: dict[str, Sponsor | NotAUser] = field(default_factory=dict)


async def read_sponsors(
    directory: GraphClient,
    graph: GraphClient,
    agent_identity_id: str,
    resolutions: SponsorResolutions | None = None,
) -> tuple[Sponsor, ...]:
    """The sponsors: the list through ``directory`` (app-only), the references resolved through ``graph``.

    Raises GraphError when the list itself is unreadable. A typed user reference whose profile cannot
    be read is kept by object id alone (that still recognises the sponsor's own account, and nothing
    more); an untyped one that cannot be resolved is not a sponsor until it is (fail closed).
    """
    known = resolutions if resolutions is not None else SponsorResolutions()
    refs = await directory.directory.list_sponsors(agent_identity_id)
    sponsors: list[Sponsor] = []
    for ref in refs:
        resolved = known.by_id.get(ref.id)
        if resolved is None:
            resolved = await _resolve(graph, ref)
            if resolved is None:  # asked again at the next read
                if ref.odata_type == USER_TYPE:
                    sponsors.append(Sponsor(ref.id))
                continue
            known.by_id[ref.id] = resolved
        if isinstance(resolved, Sponsor):
            sponsors.append(resolved)
    return tuple(sponsors)


async def _resolve(graph: GraphClient, ref: DirectoryObjectRef) -> Sponsor | NotAUser | None:
    """The user a reference names, NotAUser, or None when Graph gave no clear answer (asked again later)."""
    if ref.odata_type is not None and ref.odata_type != USER_TYPE:
        # A group sponsor: its members are not read, so nobody counts as a sponsor through it.
        log.info("sponsor of type %s ignored: only user sponsors are recognised", ref.odata_type)
        return NotAUser.RESOLVED
    try:
        user = await graph.directory.get_user(ref.id)
    except GraphNotFound:
        log.info("a sponsor reference is not a user (a group or service principal): not recognised")
        return NotAUser.RESOLVED
    except GraphError as exc:
        log.warning(
            "a sponsor reference is unresolved; not recognised until the next refresh resolves it",
            extra={
                "error": type(exc).__name__,
                "status": exc.status,
                "typed": ref.odata_type is not None,
            },
        )
        return None
    return Sponsor(ref.id, user.user_principal_name, user.mail, user.display_name)
