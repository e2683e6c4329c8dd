"""Chat messages (``/chats/{id}/messages``): reading, posting, editing, soft-deleting, reacting, and the
images pasted into them (hosted contents)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from datetime import datetime
from typing import Any, Literal

from service.graph.errors import GraphPayloadError
from service.graph.models import ChatMessage, HostedContent, OutboundAttachment, OutboundMention
from service.graph.pages import Page
from service.graph.transport import GraphTransport
from service.graph.urls import MAX_TOP, check_top, graph_timestamp


class GraphMessages:
    def __init__(self, transport: GraphTransport) -> None:
        self._t = transport

    def list_chat_messages(
        self, chat_id: str, *, since: datetime | None, top: int = MAX_TOP, max_pages: int = 10
    ) -> AsyncGenerator[Page[ChatMessage], None]:
        """Pages of messages modified after ``since`` (all messages when None), most recently
        modified first.

        Every message created after ``since`` was modified after it too, so nothing new is missed; but
        old messages edited, deleted or reacted to since then come back as well (Graph moves
        lastModifiedDateTime for each): callers judge what is new by createdDateTime, never by being
        listed here. This is the only filter Graph offers that finds what is new: createdDateTime
        takes only ``lt`` ("List messages in a chat", read, not run here). Each page's ``next_link``
        says whether Graph has more, and ``skipped`` how many items were unreadable.
        """
        params: dict[str, str | int] = {
            "$top": check_top(top),
            "$orderby": "lastModifiedDateTime desc",
        }
        if since is not None:
            # Graph applies this $filter only together with the $orderby on the same property.
            params["$filter"] = f"lastModifiedDateTime gt {graph_timestamp(since)}"
        url, route = self._t.urls.url("chats/{}/messages", chat_id, params=params)
        return self._t.pages(url, route, ChatMessage, "chat message", max_pages)

    async def get_newest_chat_message(self, chat_id: str) -> ChatMessage | None:
        """The most recently *created* message (deleted ones included), or None for an empty chat.

        Ordered by creation, never by lastModifiedDateTime: an edit, a soft delete or a reaction moves
        an old message's lastModifiedDateTime to now, and a first sight that took such a message for
        the newest would set its baseline days back and replay everything since. Graph's "List
        messages in a chat" documents ``$orderby`` on lastModifiedDateTime (the default) and
        createdDateTime, descending only; ``$filter`` on createdDateTime takes only ``lt`` and applies
        only with the matching ``$orderby`` (read, not run here: no tenant).

        Raises GraphPayloadError when that message is unreadable: answering None would let a first
        sight treat a chat with history as empty.
        """
        url, route = self._t.urls.url(
            "chats/{}/messages", chat_id, params={"$top": 1, "$orderby": "createdDateTime desc"}
        )
        response = await self._t.request("GET", url, route=route, idempotent=True)
        page = self._t.page(response, ChatMessage, "chat message", route)
        if page.skipped:
            raise GraphPayloadError(
                f"the newest message on {route} is unreadable; try the chat again later"
            )
        return page.items[0] if page.items else None

    async def send_chat_message(
        self,
        chat_id: str,
        content: str,
        content_type: Literal["text", "html"] = "text",
        mentions: Sequence[OutboundMention] = (),
        cards: Sequence[OutboundAttachment] = (),
    ) -> ChatMessage:
        """Post a message as the agent user. Never re-sent after a 5xx or a lost answer: the error
        then has ``outcome_unknown`` set, because the message may have been posted."""
        url, route = self._t.urls.url("chats/{}/messages", chat_id)
        body: dict[str, Any] = {"body": {"contentType": content_type, "content": content}}
        if mentions:
            body["mentions"] = [m.to_graph() for m in mentions]
        if cards:
            body["attachments"] = [c.to_graph() for c in cards]
        response = await self._t.request("POST", url, route=route, json=body, idempotent=False)
        return self._t.item(response, ChatMessage, "chat message", route)

    async def get_chat_message(self, chat_id: str, message_id: str) -> ChatMessage:
        return await self._t.get_one(
            ChatMessage, "chat message", "chats/{}/messages/{}", chat_id, message_id
        )

    async def list_hosted_contents(self, chat_id: str, message_id: str) -> list[HostedContent]:
        """The images pasted into a message ("List hostedContents", v1.0, delegated Chat.Read; read, not run)."""
        url, route = self._t.urls.url("chats/{}/messages/{}/hostedContents", chat_id, message_id)
        return await self._t.collect(url, route, HostedContent, "hosted content", max_pages=2)

    async def get_hosted_content_bytes(
        self, chat_id: str, message_id: str, hosted_id: str, *, max_bytes: int
    ) -> tuple[bytes, str | None]:
        """One pasted image's bytes and Content-Type. Refused (GraphPayloadError) when Graph declares or
        sends more than ``max_bytes``; the answer is read whole, which a cap of a few MB keeps cheap."""
        url, route = self._t.urls.url(
            "chats/{}/messages/{}/hostedContents/{}/$value", chat_id, message_id, hosted_id
        )
        response = await self._t.request("GET", url, route=route, idempotent=True)
        declared = response.headers.get("Content-Length")
        if (declared is not None and declared.isdigit() and int(declared) > max_bytes) or len(
            response.content
        ) > max_bytes:
            raise GraphPayloadError(
                f"the hosted content on {route} is larger than {max_bytes} bytes"
            )
        return response.content, response.headers.get("Content-Type")

    async def update_chat_message(
        self,
        chat_id: str,
        message_id: str,
        content: str,
        content_type: Literal["text", "html"] = "text",
    ) -> None:
        """Replace the body of a message the agent user sent. Retried like a read: the same body sent
        twice leaves the message as once. Graph's "Update chatMessage" (read, not run here): with a
        user's token (Chat.ReadWrite) the sender may change the body; 204 No Content."""
        url, route = self._t.urls.url("chats/{}/messages/{}", chat_id, message_id)
        body = {"body": {"contentType": content_type, "content": content}}
        await self._t.request("PATCH", url, route=route, json=body, idempotent=True)

    async def soft_delete_chat_message(self, user_id: str, chat_id: str, message_id: str) -> None:
        """Soft-delete a message the agent user sent (it stays listed with deletedDateTime set). Graph's
        "chatMessage: softDelete" (read, not run here): POST
        /users/{userId}/chats/{chatsId}/messages/{chatMessageId}/softDelete, delegated Chat.ReadWrite only,
        204 No Content. Not retried blindly; the caller reads the message back to settle a lost answer."""
        url, route = self._t.urls.url(
            "users/{}/chats/{}/messages/{}/softDelete", user_id, chat_id, message_id
        )
        await self._t.request("POST", url, route=route, idempotent=False)

    async def set_chat_message_reaction(
        self, chat_id: str, message_id: str, reaction_type: str
    ) -> None:
        """The agent user reacts to a chat message. Graph's "chatMessage: setReaction" (v1.0; read, not run
        here): POST /chats/{chatsId}/messages/{chatMessageId}/setReaction with {"reactionType": …} "as
        unicode", delegated Chat.ReadWrite or ChatMessage.Send (application: not supported), "204 No
        Content". The page does not say whether setting a reaction the user already set changes anything
        (Teams shows one reaction of a type per user); so it is not re-sent after a 5xx or a lost answer."""
        url, route = self._t.urls.url("chats/{}/messages/{}/setReaction", chat_id, message_id)
        await self._t.request(
            "POST", url, route=route, json={"reactionType": reaction_type}, idempotent=False
        )
