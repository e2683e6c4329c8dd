"""Reading the agent identity's sponsors the way Graph allows.

Graph's "List agentIdentity sponsors" (``GET /servicePrincipals/{id}/microsoft.graph.agentIdentity/
sponsors``) documents one permission, the application permission ``AgentIdentity.ReadWrite.All``;
delegated tokens are not supported. It answers with directoryObject references (type and id). So the
list is read with the agent identity's own app-only token (hop 2 of the chain, asked for Graph), and
each user sponsor's UPN and mail (what lets the gate recognise a sponsor's other accounts) with the
agent user's token (``GET /users/{id}``, User.ReadBasic.All). Read from the docs, not run against a
real tenant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from service.delivery.sponsors import Sponsor
from service.graph.client import GraphClient
from service.graph.errors import GraphError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SponsorRead:
    sponsors: tuple[Sponsor, ...]
    complete: bool  # False: some user sponsor's profile was unreadable and is known by object id only


async def read_sponsors(directory: GraphClient, graph: GraphClient, agent_identity_id: str) -> SponsorRead:
    """The sponsors: the list through ``directory`` (app-only), the profiles through ``graph``.

    Raises GraphError when the list itself is unreadable. A sponsor whose profile cannot be read is
    kept by object id alone (that still recognises the sponsor's own account, and nothing more).
    """
    refs = await directory.list_sponsors(agent_identity_id)
    sponsors: list[Sponsor] = []
    complete = True
    for ref in refs:
        if not ref.is_user:
            # A group sponsor: a group's members are not read, so nobody counts as a sponsor through it.
            log.info("sponsor of type %s ignored: only user sponsors are recognised", ref.odata_type)
            continue
        try:
            user = await graph.get_user(ref.id)
        except GraphError as exc:
            log.warning("a sponsor's profile is unreadable; recognising that sponsor by object id only",
                        extra={"error": type(exc).__name__, "status": exc.status})
            sponsors.append(Sponsor(ref.id))
            complete = False
            continue
        sponsors.append(Sponsor(ref.id, user.user_principal_name, user.mail, user.display_name))
    return SponsorRead(tuple(sponsors), complete)
