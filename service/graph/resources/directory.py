"""Who is who: the agent user itself (``/me``), other users, and the agent identity's sponsors."""

from __future__ import annotations

from service.graph.models import DirectoryObjectRef, User
from service.graph.transport import GraphTransport


class GraphDirectory:
    def __init__(self, transport: GraphTransport) -> None:
        self._t = transport

    async def get_me(self) -> User:
        return await self._t.get_one(User, "user", "me")

    async def get_user(self, user_id: str) -> User:
        return await self._t.get_one(User, "user", "users/{}", user_id)

    async def list_sponsors(
        self, agent_identity_id: str, *, max_pages: int = 5
    ) -> list[DirectoryObjectRef]:
        """The agent identity's sponsors as directoryObject references (users or groups).

        Graph's "List agentIdentity sponsors" takes an app-only token only (application permission
        AgentIdentity.ReadWrite.All; delegated: not supported): call it on the client ``with_tokens``
        of the agent identity's app-only provider.
        """
        url, route = self._t.urls.url(
            "servicePrincipals/{}/microsoft.graph.agentIdentity/sponsors", agent_identity_id
        )
        return await self._t.collect(url, route, DirectoryObjectRef, "sponsor", max_pages)
