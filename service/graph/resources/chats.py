"""The agent user's chats and their members (``/me/chats``, ``/chats/{id}``, ``/chats/{id}/members``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Iterable
from typing import Any, Literal, NamedTuple
from urllib.parse import quote

from service.graph.errors import GraphError, GraphPayloadError
from service.graph.models import Chat, ChatMember
from service.graph.pages import Page
from service.graph.transport import GraphTransport
from service.graph.urls import MAX_TOP

log = logging.getLogger(__name__)


class ChatSweep(NamedTuple):
    """The agent user's chats from one ``GET /me/chats`` walk; ``complete`` is False when a page
    after the first failed or the page cap was reached (the chats read so far are kept)."""

    chats: list[Chat]
    complete: bool


class GraphChats:
    def __init__(self, transport: GraphTransport) -> None:
        self._t = transport

    async def list_my_chats(self, *, max_pages: int = 20, members: bool = True) -> ChatSweep:
        """Every chat of the agent user, up to ``max_pages`` pages of 50, with its newest message's
        preview (and its members unless ``members=False``).

        A failure on the first page raises (nothing was read); a later failure returns what was
        read with ``complete=False``.
        """
        chats: list[Chat] = []
        last: Page[Chat] | None = None
        try:
            async for last in self.my_chats_pages(members=members, max_pages=max_pages):
                chats.extend(last.items)
        except GraphError as exc:
            if last is None:
                raise
            log.warning("chat sweep stopped after %d chat(s): %s", len(chats), type(exc).__name__)
            return ChatSweep(chats, complete=False)
        if last is not None and last.next_link is not None:
            log.warning("chat sweep stopped at the cap of %d pages; more chats remain", max_pages)
            return ChatSweep(chats, complete=False)
        return ChatSweep(chats, complete=True)

    def my_chats_pages(
        self,
        *,
        max_pages: int,
        members: bool = False,
        ordered: bool = False,
        start: str | None = None,
    ) -> AsyncGenerator[Page[Chat], None]:
        """Pages of the agent user's chats with their newest-message previews, and their members when
        asked (discovery; the change scan and the sweep need only previews).

        ``ordered`` asks for ``$orderby=lastMessagePreview/createdDateTime desc``, the one ordering
        "List chats" documents (the single-host system saw a tenant refuse it with 400: the caller
        falls back to an unordered walk). ``start`` resumes a walk at an earlier page's
        ``@odata.nextLink``, which must stay on the Graph origin.
        """
        params: dict[str, str | int] = {
            "$expand": "lastMessagePreview,members" if members else "lastMessagePreview",
            "$top": MAX_TOP,
        }
        if ordered:
            params["$orderby"] = "lastMessagePreview/createdDateTime desc"
        url, route = self._t.urls.url("me/chats", params=params)
        if start is not None:
            if not self._t.urls.same_origin(start):
                raise GraphPayloadError(
                    f"a saved next page link for {route} leaves the Graph origin {self._t.urls.base}"
                )
            url = start
        return self._t.pages(url, route, Chat, "chat", max_pages)

    async def my_chats_page(self, next_link: str | None = None) -> Page[Chat]:
        """One page of the agent user's chats with members and previews (``my_chats_pages``): for a
        walk paced over several cycles, which checks between pages whether it may go on."""
        pages = self.my_chats_pages(members=True, max_pages=1, start=next_link)
        try:
            return await anext(pages)
        finally:
            await pages.aclose()

    async def get_chat(self, chat_id: str) -> Chat:
        return await self._t.get_one(
            Chat, "chat", "chats/{}", chat_id, params={"$expand": "members"}
        )

    async def list_chat_members(self, chat_id: str, *, max_pages: int = 5) -> list[ChatMember]:
        url, route = self._t.urls.url("chats/{}/members", chat_id)
        return await self._t.collect(url, route, ChatMember, "chat member", max_pages)

    async def create_chat(
        self,
        chat_type: Literal["oneOnOne", "group"],
        member_ids: Iterable[str],
        topic: str | None = None,
    ) -> Chat:
        """Create a chat whose members are ``member_ids`` (Graph requires the agent user among them).

        A oneOnOne chat is idempotent in Graph (it returns the existing chat between the two), so
        only that kind is retried after a 5xx; a group chat could be created twice.
        """
        members = list(dict.fromkeys(member_ids))
        if chat_type == "oneOnOne" and len(members) != 2:
            raise ValueError(
                "a oneOnOne chat has exactly two members: the agent user and the other person"
            )
        if chat_type == "group" and len(members) < 2:
            raise ValueError("a group chat needs at least two members, the agent user among them")
        body: dict[str, Any] = {
            "chatType": chat_type,
            "members": [self._member_binding(m) for m in members],
        }
        if topic:
            if chat_type != "group":
                raise ValueError("only a group chat has a topic")
            body["topic"] = topic
        url, route = self._t.urls.url("chats")
        response = await self._t.request(
            "POST", url, route=route, json=body, idempotent=chat_type == "oneOnOne"
        )
        return self._t.item(response, Chat, "chat", route)

    async def add_chat_member(
        self, chat_id: str, user_id: str, *, roles: Iterable[str] = ("owner",)
    ) -> ChatMember:
        url, route = self._t.urls.url("chats/{}/members", chat_id)
        body = self._member_binding(user_id, roles)
        response = await self._t.request("POST", url, route=route, json=body, idempotent=False)
        return self._t.item(response, ChatMember, "chat member", route)

    def _member_binding(self, user_id: str, roles: Iterable[str] = ("owner",)) -> dict[str, Any]:
        if not user_id:
            raise ValueError("a chat member needs a user id")
        literal = user_id.replace("'", "''")  # an OData string literal
        return {
            "@odata.type": "#microsoft.graph.aadUserConversationMember",
            "roles": list(roles),
            "user@odata.bind": f"{self._t.urls.base}/users('{quote(literal, safe='@')}')",
        }
