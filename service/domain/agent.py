"""Who the agent is: the identity its own messages are recognised by, learnt once at start-up."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AgentUser:
    """The Entra user the agent acts as. Its own chat messages are dropped by object id (Graph's
    chatMessage carries no UPN) and its own mail by any of its addresses."""

    object_id: str
    upn: str | None
    display_name: str | None = None
    mail: str | None = None
    # Delegated mode: the identity is a signed-in person's, shared by the agent's posts and the person's
    # own, so it alone never says the agent wrote a message (service.graph.authorship).
    posts_as_person: bool = False

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(a for a in (self.upn, self.mail) if a)
