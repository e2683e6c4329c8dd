"""Who the agent is: the identity its own messages are recognised by, learnt once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from service.graph.client import GraphClient


@dataclass(frozen=True, slots=True)
class AgentUser:
    """The Entra user the agent acts as. Its own chat messages are dropped by object id (Graph's
    chatMessage carries no UPN) and its own mail by any of its addresses."""

    object_id: str
    upn: str | None
    display_name: str | None = None
    mail: str | None = None
    # Delegated mode: the identity is a signed-in person's, shared by the agent's posts and the person's
    # own, so it alone never says the agent wrote a message (service.domain.authorship).
    posts_as_person: bool = False

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(a for a in (self.upn, self.mail) if a)


async def load_agent_user(graph: GraphClient, *, posts_as_person: bool = False) -> AgentUser:
    """Who the Graph token acts as (GET /me): the agent user, or in delegated mode the signed-in person."""
    me = await graph.get_me()
    return AgentUser(
        me.id, me.user_principal_name, me.display_name, me.mail, posts_as_person=posts_as_person
    )
