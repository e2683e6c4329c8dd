"""The Graph client: the calls the workers and MCP tools make, over one pooled httpx client.

Every request goes through ``_request``, which applies ``retry_policy`` (429 Retry-After, backoff
on idempotent 5xx, one token refresh on 401) and ``pacing`` (the client-wide hold after Graph said
"later", shared with the fleet), records ``graph_requests{route, status}`` with a route
template (never a raw id) and opens one OpenTelemetry span per attempt. Collections are read page
by page as async iterators, so a caller can stop as soon as it has what it needs; ``@odata.nextLink``
is followed only when it points at the configured Graph origin, so the token never leaves it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Literal, NamedTuple, TypeVar
from urllib.parse import quote, urlencode

import httpx
from opentelemetry import trace
from pydantic import BaseModel

from service.graph.auth.tokens import GRAPH_SCOPE, TokenProvider
from service.graph.errors import (
    GraphAuthError,
    GraphBadRequest,
    GraphConnectionError,
    GraphError,
    GraphForbidden,
    GraphNotFound,
    GraphPayloadError,
    GraphServerError,
    GraphThrottled,
)
from service.graph.http_pool import new_http_client
from service.graph.models import (
    Chat,
    ChatMember,
    ChatMessage,
    DirectoryObjectRef,
    HostedContent,
    MailMessage,
    OutboundCard,
    OutboundMention,
    User,
)
from service.graph.pacing import GraphPacing, PacingRules, SharedHold
from service.graph.pages import Page, parse_item, parse_page
from service.graph.subscription_model import GraphSubscription
from service.graph.retry_policy import Action, RetryPolicy, Step, next_step
from service.telemetry.metrics import Metrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

T = TypeVar("T", bound=BaseModel)

MAX_TOP = 50  # Graph's ceiling for $top on chats, chat messages and (as used here) mail
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Exceptions raised before a single byte of the request left this process: safe to send again.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class ChatSweep(NamedTuple):
    """The agent user's chats from one ``GET /me/chats`` walk; ``complete`` is False when a page
    after the first failed or the page cap was reached (the chats read so far are kept)."""

    chats: list[Chat]
    complete: bool


class GraphClient:
    def __init__(
        self,
        base_url: str,
        token_provider: TokenProvider,
        *,
        http: httpx.AsyncClient | None = None,
        metrics: Metrics | None = None,
        max_retry_after: float = 60.0,
        retry_policy: RetryPolicy | None = None,
        scope: str = GRAPH_SCOPE,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        shared_hold: SharedHold | None = None,
    ) -> None:
        base = httpx.URL(base_url.rstrip("/"))
        if base.scheme not in _DEFAULT_PORTS or not base.host:
            raise ValueError(
                f"the Graph base URL must be an absolute http(s) URL, got {base_url!r} (set ENTRABOT_GRAPH_URL)"
            )
        self._base = str(base)
        self._origin = _origin(base)
        self._tokens = token_provider
        self._owns_http = http is None
        self._http = http if http is not None else new_http_client()
        self._metrics = metrics
        self._policy = retry_policy or RetryPolicy(max_retry_after=max_retry_after)
        self._scope = scope
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        # Graph's limits are per app, and a throttled request counts against them: after a 429 (or a
        # 5xx saying "later") every request of this client waits, not only the one that got it, or the
        # other concurrent reads keep the window full. ``shared_hold`` carries such holds across the fleet.
        self._pacing = GraphPacing(
            PacingRules(max_hold_s=self._policy.max_retry_after),
            clock=clock,
            sleep=sleep,
            rng=self._rng,
            shared=shared_hold,
            metrics=metrics,
        )

    def with_tokens(self, token_provider: TokenProvider) -> GraphClient:
        """This client's Graph, connections, metrics, retry rules and holds, acting with other tokens (the
        agent identity's app-only ones, for the directory reads Graph takes no delegated token for)."""
        client = GraphClient(
            self._base,
            token_provider,
            http=self._http,
            metrics=self._metrics,
            retry_policy=self._policy,
            scope=self._scope,
            clock=self._clock,
            sleep=self._sleep,
            rng=self._rng,
        )
        client._pacing = self._pacing  # one app's budget: a hold on either client holds both
        return client

    async def aclose(self) -> None:
        """Close the HTTP client if this GraphClient created it (a shared one belongs to the app)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> GraphClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- users -------------------------------------------------------------------------------

    async def get_me(self) -> User:
        return await self._get_one(User, "user", "me")

    async def get_user(self, user_id: str) -> User:
        return await self._get_one(User, "user", "users/{}", user_id)

    async def list_sponsors(
        self, agent_identity_id: str, *, max_pages: int = 5
    ) -> list[DirectoryObjectRef]:
        """The agent identity's sponsors as directoryObject references (users or groups).

        Graph's "List agentIdentity sponsors" takes an app-only token only (application permission
        AgentIdentity.ReadWrite.All; delegated: not supported): call it on the client ``with_tokens``
        of the agent identity's app-only provider.
        """
        url, route = self._url(
            "servicePrincipals/{}/microsoft.graph.agentIdentity/sponsors", agent_identity_id
        )
        return await self._collect(url, route, DirectoryObjectRef, "sponsor", max_pages)

    # --- chats -------------------------------------------------------------------------------

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
        url, route = self._url("me/chats", params=params)
        if start is not None:
            if not self._same_origin(start):
                raise GraphPayloadError(
                    f"a saved next page link for {route} leaves the Graph origin {self._base}"
                )
            url = start
        return self._pages(url, route, Chat, "chat", max_pages)

    async def my_chats_page(self, next_link: str | None = None) -> Page[Chat]:
        """One page of the agent user's chats with members and previews (``my_chats_pages``): for a
        walk paced over several cycles, which checks between pages whether it may go on."""
        pages = self.my_chats_pages(members=True, max_pages=1, start=next_link)
        try:
            return await anext(pages)
        finally:
            await pages.aclose()

    async def get_chat(self, chat_id: str) -> Chat:
        return await self._get_one(Chat, "chat", "chats/{}", chat_id, params={"$expand": "members"})

    async def list_chat_members(self, chat_id: str, *, max_pages: int = 5) -> list[ChatMember]:
        url, route = self._url("chats/{}/members", chat_id)
        return await self._collect(url, route, ChatMember, "chat member", max_pages)

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
        url, route = self._url("chats")
        response = await self._request(
            "POST", url, route=route, json=body, idempotent=chat_type == "oneOnOne"
        )
        return self._parse_one(response, Chat, "chat", route)

    async def add_chat_member(
        self, chat_id: str, user_id: str, *, roles: Iterable[str] = ("owner",)
    ) -> ChatMember:
        url, route = self._url("chats/{}/members", chat_id)
        body = self._member_binding(user_id, roles)
        response = await self._request("POST", url, route=route, json=body, idempotent=False)
        return self._parse_one(response, ChatMember, "chat member", route)

    # --- chat messages -----------------------------------------------------------------------

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
            "$top": _check_top(top),
            "$orderby": "lastModifiedDateTime desc",
        }
        if since is not None:
            # Graph applies this $filter only together with the $orderby on the same property.
            params["$filter"] = f"lastModifiedDateTime gt {graph_timestamp(since)}"
        url, route = self._url("chats/{}/messages", chat_id, params=params)
        return self._pages(url, route, ChatMessage, "chat message", max_pages)

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
        url, route = self._url(
            "chats/{}/messages", chat_id, params={"$top": 1, "$orderby": "createdDateTime desc"}
        )
        response = await self._request("GET", url, route=route, idempotent=True)
        page = parse_page(
            self._json(response, route), ChatMessage, kind="chat message", metrics=self._metrics
        )
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
        cards: Sequence[OutboundCard] = (),
    ) -> ChatMessage:
        """Post a message as the agent user. Never re-sent after a 5xx or a lost answer: the error
        then has ``outcome_unknown`` set, because the message may have been posted."""
        url, route = self._url("chats/{}/messages", chat_id)
        body: dict[str, Any] = {"body": {"contentType": content_type, "content": content}}
        if mentions:
            body["mentions"] = [m.to_graph() for m in mentions]
        if cards:
            body["attachments"] = [c.to_graph() for c in cards]
        response = await self._request("POST", url, route=route, json=body, idempotent=False)
        return self._parse_one(response, ChatMessage, "chat message", route)

    async def get_chat_message(self, chat_id: str, message_id: str) -> ChatMessage:
        return await self._get_one(
            ChatMessage, "chat message", "chats/{}/messages/{}", chat_id, message_id
        )

    async def list_hosted_contents(self, chat_id: str, message_id: str) -> list[HostedContent]:
        """The images pasted into a message ("List hostedContents", v1.0, delegated Chat.Read; read, not run)."""
        url, route = self._url("chats/{}/messages/{}/hostedContents", chat_id, message_id)
        return await self._collect(url, route, HostedContent, "hosted content", max_pages=2)

    async def get_hosted_content_bytes(
        self, chat_id: str, message_id: str, hosted_id: str, *, max_bytes: int
    ) -> tuple[bytes, str | None]:
        """One pasted image's bytes and Content-Type. Refused (GraphPayloadError) when Graph declares or
        sends more than ``max_bytes``; the answer is read whole, which a cap of a few MB keeps cheap."""
        url, route = self._url(
            "chats/{}/messages/{}/hostedContents/{}/$value", chat_id, message_id, hosted_id
        )
        response = await self._request("GET", url, route=route, idempotent=True)
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
        url, route = self._url("chats/{}/messages/{}", chat_id, message_id)
        body = {"body": {"contentType": content_type, "content": content}}
        await self._request("PATCH", url, route=route, json=body, idempotent=True)

    async def soft_delete_chat_message(self, user_id: str, chat_id: str, message_id: str) -> None:
        """Soft-delete a message the agent user sent (it stays listed with deletedDateTime set). Graph's
        "chatMessage: softDelete" (read, not run here): POST
        /users/{userId}/chats/{chatsId}/messages/{chatMessageId}/softDelete, delegated Chat.ReadWrite only,
        204 No Content. Not retried blindly; the caller reads the message back to settle a lost answer."""
        url, route = self._url(
            "users/{}/chats/{}/messages/{}/softDelete", user_id, chat_id, message_id
        )
        await self._request("POST", url, route=route, idempotent=False)

    async def set_chat_message_reaction(
        self, chat_id: str, message_id: str, reaction_type: str
    ) -> None:
        """The agent user reacts to a chat message. Graph's "chatMessage: setReaction" (v1.0; read, not run
        here): POST /chats/{chatsId}/messages/{chatMessageId}/setReaction with {"reactionType": …} "as
        unicode", delegated Chat.ReadWrite or ChatMessage.Send (application: not supported), "204 No
        Content". The page does not say whether setting a reaction the user already set changes anything
        (Teams shows one reaction of a type per user); so it is not re-sent after a 5xx or a lost answer."""
        url, route = self._url("chats/{}/messages/{}/setReaction", chat_id, message_id)
        await self._request(
            "POST", url, route=route, json={"reactionType": reaction_type}, idempotent=False
        )

    # --- mail --------------------------------------------------------------------------------

    def list_mail(
        self,
        since: datetime | None,
        *,
        top: int = MAX_TOP,
        folder: str = "inbox",
        max_pages: int = 10,
        mailbox: str | None = None,
    ) -> AsyncGenerator[Page[MailMessage], None]:
        """Pages of ``folder``'s mail received after ``since`` (all when None), newest first, with their
        internet headers, which the automated-mail filter reads: Graph returns internetMessageHeaders only
        when $select names it, and then only what $select names (read, not run: the message resource).

        ``mailbox`` (a user id or UPN) reads a mailbox shared with the agent user instead of its own:
        ``/users/{id | userPrincipalName}/mailFolders/{id}/messages`` with Mail.Read.Shared ("Get Outlook
        messages in a shared or delegated folder"; read, not run); 403 when the mailbox is not shared with it."""
        params: dict[str, str | int] = {
            "$top": _check_top(top),
            "$orderby": "receivedDateTime desc",
            "$select": MailMessage.graph_select(),
        }
        if since is not None:
            params["$filter"] = f"receivedDateTime gt {graph_timestamp(since)}"
        if mailbox is None:
            url, route = self._url("me/mailFolders/{}/messages", folder, params=params)
        else:
            url, route = self._url(
                "users/{}/mailFolders/{}/messages", mailbox, folder, params=params
            )
        return self._pages(url, route, MailMessage, "mail", max_pages)

    async def get_mail(self, message_id: str, *, mailbox: str | None = None) -> MailMessage:
        if mailbox is None:
            return await self._get_one(MailMessage, "mail", "me/messages/{}", message_id)
        return await self._get_one(MailMessage, "mail", "users/{}/messages/{}", mailbox, message_id)

    async def send_mail(
        self,
        to: str | Iterable[str],
        subject: str,
        body: str,
        *,
        cc: Iterable[str] = (),
        content_type: Literal["text", "html"] = "text",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send mail as the agent user (kept in Sent Items). Like a chat message, never re-sent: Graph
        answers 202 with no body, so a lost answer leaves only Sent Items to tell. ``headers`` are custom
        internet message headers, names starting ``x-`` (the sendMail page's example 2; Graph refuses other
        names with 400 InvalidInternetMessageHeader, as its users report; read, not run)."""
        recipients = [to] if isinstance(to, str) else list(to)
        copied = list(cc)
        if not recipients and not copied:
            raise ValueError("send_mail needs at least one recipient")
        message: dict[str, Any] = {
            "subject": subject,
            "body": {"contentType": "HTML" if content_type == "html" else "Text", "content": body},
            "toRecipients": _recipients(recipients),
        }
        if copied:
            message["ccRecipients"] = _recipients(copied)
        if headers:
            message["internetMessageHeaders"] = _headers(headers)
        url, route = self._url("me/sendMail")
        await self._request(
            "POST",
            url,
            route=route,
            json={"message": message, "saveToSentItems": True},
            idempotent=False,
        )

    async def answer_mail(
        self,
        message_id: str,
        kind: Literal["reply", "replyAll", "forward"],
        comment: str,
        *,
        to: Iterable[str] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Reply, reply-all or forward (to ``to``) a mail of the agent user's mailbox with ``comment`` above
        the original, which Graph quotes; saved to Sent Items, 202 with no body, never re-sent ("message:
        reply", "replyAll", "forward", v1.0; read, not run). The custom ``headers`` ride on the message
        parameter, "any writeable properties to update in the reply message": that Graph keeps them there as
        sendMail does is not documented, so whoever settles a lost answer must not rely on them alone."""
        body: dict[str, Any] = {"comment": comment}
        if kind == "forward":
            recipients = list(to)
            if not recipients:
                raise ValueError("a forward needs at least one recipient")
            body["toRecipients"] = _recipients(recipients)
        elif list(to):
            raise ValueError("a reply goes to the people of the original; it takes no recipients")
        if headers:
            body["message"] = {"internetMessageHeaders": _headers(headers)}
        url, route = self._url("me/messages/{}/" + kind, message_id)
        await self._request("POST", url, route=route, json=body, idempotent=False)

    # --- change-notification subscriptions -------------------------------------------------

    async def create_subscription(self, body: Mapping[str, Any]) -> GraphSubscription:
        """POST /subscriptions. Not repeated after a 5xx or a lost answer (a second one could be made);
        the manager creates again on its next cycle and an orphan expires on its own."""
        url, route = self._url("subscriptions")
        response = await self._request("POST", url, route=route, json=dict(body), idempotent=False)
        return self._parse_one(response, GraphSubscription, "subscription", route)

    async def renew_subscription(
        self, subscription_id: str, expiration: datetime
    ) -> GraphSubscription:
        """PATCH expirationDateTime; Graph says a renewal also reauthorizes (lifecycle notifications page)."""
        url, route = self._url("subscriptions/{}", subscription_id)
        response = await self._request(
            "PATCH",
            url,
            route=route,
            json={"expirationDateTime": graph_timestamp(expiration)},
            idempotent=True,
        )
        return self._parse_one(response, GraphSubscription, "subscription", route)

    async def reauthorize_subscription(self, subscription_id: str) -> None:
        url, route = self._url("subscriptions/{}/reauthorize", subscription_id)
        await self._request("POST", url, route=route, idempotent=True)

    async def delete_subscription(self, subscription_id: str) -> None:
        url, route = self._url("subscriptions/{}", subscription_id)
        await self._request("DELETE", url, route=route, idempotent=True)

    # --- plumbing ----------------------------------------------------------------------------

    def _url(
        self, template: str, *ids: str, params: Mapping[str, str | int] | None = None
    ) -> tuple[str, str]:
        """(absolute URL, route template for metrics) from e.g. ``"chats/{}/messages"`` and the ids."""
        url = f"{self._base}/{template.format(*(_segment(i) for i in ids))}"
        if params:
            # Built by hand rather than by httpx's params, which would send "%24filter" and "+" for
            # spaces; Graph documents the literal "$" names and %20.
            url += "?" + urlencode(params, quote_via=quote, safe="$:'(),")
        return url, template.replace("{}", "{id}")

    def _member_binding(self, user_id: str, roles: Iterable[str] = ("owner",)) -> dict[str, Any]:
        if not user_id:
            raise ValueError("a chat member needs a user id")
        literal = user_id.replace("'", "''")  # an OData string literal
        return {
            "@odata.type": "#microsoft.graph.aadUserConversationMember",
            "roles": list(roles),
            "user@odata.bind": f"{self._base}/users('{quote(literal, safe='@')}')",
        }

    async def _get_one(
        self,
        model: type[T],
        kind: str,
        template: str,
        *ids: str,
        params: Mapping[str, str | int] | None = None,
    ) -> T:
        url, route = self._url(template, *ids, params=params)
        response = await self._request("GET", url, route=route, idempotent=True)
        return self._parse_one(response, model, kind, route)

    async def _collect(
        self, url: str, route: str, model: type[T], kind: str, max_pages: int
    ) -> list[T]:
        items: list[T] = []
        async for page in self._pages(url, route, model, kind, max_pages):
            items.extend(page.items)
        return items

    async def _pages(
        self, url: str, route: str, model: type[T], kind: str, max_pages: int
    ) -> AsyncGenerator[Page[T], None]:
        next_url: str | None = url
        for _ in range(max_pages):
            if next_url is None:
                return
            response = await self._request("GET", next_url, route=route, idempotent=True)
            page = parse_page(self._json(response, route), model, kind=kind, metrics=self._metrics)
            yield page
            next_url = page.next_link
            if next_url is not None and not self._same_origin(next_url):
                log.warning(
                    "refused an @odata.nextLink on %s that leaves the Graph origin %s",
                    route,
                    self._base,
                )
                raise GraphPayloadError(
                    f"Graph's next page link on {route} points away from {self._base}; paging stopped "
                    "there so the token is not sent elsewhere (check ENTRABOT_GRAPH_URL and any proxy)"
                )

    def _same_origin(self, link: str) -> bool:
        try:
            return _origin(httpx.URL(link)) == self._origin
        except httpx.InvalidURL:
            return False

    async def _request(
        self, method: str, url: str, *, route: str, json: Any = None, idempotent: bool
    ) -> httpx.Response:
        attempt = 0
        refreshed = False
        waited_out = 0.0  # the hold this call already slept through as its own retry delay
        while True:
            attempt += 1
            token = await self._tokens.get_token(self._scope)
            waited_out = await self._pacing.admit(waited_out)
            try:
                response = await self._send(method, url, route, token.token, json, attempt)
            except httpx.TransportError as exc:
                self._pacing.note(None, None, route)
                sent = not isinstance(exc, _NOT_SENT)
                step = self._decide(None, idempotent, sent, attempt, refreshed, None)
                if step.action is Action.RETRY:
                    await self._sleep(step.delay)
                    continue
                raise GraphConnectionError(
                    f"Graph {method} {route}: no answer ({type(exc).__name__})"
                    + (
                        "; it may have been carried out, do not repeat it blindly"
                        if sent and not idempotent
                        else ""
                    ),
                    outcome_unknown=sent and not idempotent,
                ) from None
            except BaseException:
                self._pacing.note(None, None, route)  # cancelled mid-request: free the probe slot
                raise
            step = self._decide(
                response.status_code,
                idempotent,
                True,
                attempt,
                refreshed,
                response.headers.get("Retry-After"),
            )
            self._pacing.note(response.status_code, step.retry_after, route)
            if step.action is Action.REFRESH:
                self._tokens.invalidate(self._scope, token.token)
                refreshed = True
                attempt -= 1  # the resend after a refresh is not a retry of a failure
                continue
            if step.action is Action.RETRY:
                # One sleep covers both this call's retry delay and the client's hold, if longer.
                delay = step.delay
                if self._pacing.until > waited_out:
                    delay = max(delay, self._pacing.until - self._clock())
                    waited_out = self._pacing.until
                await self._sleep(delay)
                continue
            if response.is_success:
                return response
            raise _error_for(response, method, route, step.retry_after, idempotent)

    def _decide(
        self,
        status: int | None,
        idempotent: bool,
        sent: bool,
        attempt: int,
        refreshed: bool,
        retry_after: str | None,
    ) -> Step:
        return next_step(
            status=status,
            idempotent=idempotent,
            request_sent=sent,
            attempt=attempt,
            refreshed=refreshed,
            retry_after_header=retry_after,
            now=self._clock(),
            policy=self._policy,
            rng=self._rng,
        )

    async def _send(
        self, method: str, url: str, route: str, token: str, json: Any, attempt: int
    ) -> httpx.Response:
        attributes: dict[str, str | int] = {
            "http.request.method": method,
            "url.template": route,
            "http.request.resend_count": attempt - 1,
        }
        with tracer.start_as_current_span(
            f"Graph {method} {route}", kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            try:
                response = await self._http.request(
                    method,
                    url,
                    json=json,
                    headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
                )
            except httpx.TransportError as exc:
                span.set_attribute("error.type", type(exc).__name__)
                self._count(route, "error")
                raise
            span.set_attribute("http.response.status_code", response.status_code)
            request_id = response.headers.get("request-id")
            if request_id:
                span.set_attribute("graph.request_id", request_id)
        self._count(route, str(response.status_code))
        if response.status_code == 429 and self._metrics is not None:
            self._metrics.graph_throttles.labels(route=route).inc()
        return response

    def _count(self, route: str, status: str) -> None:
        if self._metrics is not None:
            self._metrics.graph_requests.labels(route=route, status=status).inc()

    def _json(self, response: httpx.Response, route: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise GraphPayloadError(
                f"Graph answered {route} with HTTP {response.status_code} but no JSON body; nothing was read",
                status=response.status_code,
                request_id=response.headers.get("request-id"),
            ) from None

    def _parse_one(self, response: httpx.Response, model: type[T], kind: str, route: str) -> T:
        item = parse_item(self._json(response, route), model, kind=kind, metrics=self._metrics)
        if item is None:
            done = (
                ""
                if response.request.method == "GET"
                else " (the request itself succeeded; do not repeat it)"
            )
            raise GraphPayloadError(
                f"Graph's answer on {route} is not a readable {kind}{done}",
                status=response.status_code,
                request_id=response.headers.get("request-id"),
            )
        return item


def _recipients(addresses: Iterable[str]) -> list[dict[str, Any]]:
    return [{"emailAddress": {"address": address}} for address in addresses]


def _headers(headers: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in headers.items()]


def graph_timestamp(moment: datetime) -> str:
    """ISO 8601 UTC with milliseconds, as Graph compares it; truncated, never rounded up, so a
    ``gt`` filter can only include more, never skip a message in the same millisecond."""
    if moment.tzinfo is None:
        raise ValueError("Graph timestamps must be timezone-aware (use datetime.now(timezone.utc))")
    utc = moment.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _segment(value: str) -> str:
    """One path segment from an id. Ids reach here from model tool calls too, so one that could
    climb out of its collection ("..", "a/b") is refused or escaped."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise ValueError(f"not a usable Graph id: {value!r}")
    return quote(value, safe=":@")


def _check_top(top: int) -> int:
    if not 1 <= top <= MAX_TOP:
        raise ValueError(f"$top must be between 1 and {MAX_TOP} (Graph refuses more), got {top}")
    return top


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host.lower(), url.port or _DEFAULT_PORTS.get(url.scheme)


def _graph_error_fields(response: httpx.Response) -> tuple[str | None, str | None, str | None]:
    """(code, message, request id) from Graph's {"error": {"code", "message", "innerError"}}."""
    try:
        body = response.json()
    except ValueError:
        body = None
    raw_error = body.get("error") if isinstance(body, dict) else None
    error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
    code = error.get("code") if isinstance(error.get("code"), str) else None
    message = error.get("message") if isinstance(error.get("message"), str) else None
    raw_inner = error.get("innerError")
    inner: dict[str, Any] = raw_inner if isinstance(raw_inner, dict) else {}
    request_id = response.headers.get("request-id") or inner.get("request-id")
    return (
        code,
        (message[:200] if message else None),
        request_id if isinstance(request_id, str) else None,
    )


def _error_for(
    response: httpx.Response, method: str, route: str, retry_after: float | None, idempotent: bool
) -> GraphError:
    status = response.status_code
    code, message, request_id = _graph_error_fields(response)
    said = f" ({code}: {message})" if code or message else ""
    what = f"Graph {method} {route} answered {status}{said}"
    fields: dict[str, Any] = {"status": status, "code": code, "request_id": request_id}
    if status == 400:
        return GraphBadRequest(
            f"{what}; the request does not fit this endpoint, repeating it will not help", **fields
        )
    if status == 401:
        return GraphAuthError(
            f"{what} even with a fresh token; check that the agent user is enabled and licensed and that "
            "the Graph permissions are consented for its agent identity",
            **fields,
        )
    if status == 403:
        return GraphForbidden(
            f"{what}; the agent user lacks the permission or the membership this needs", **fields
        )
    if status == 404:
        return GraphNotFound(f"{what}; it does not exist or the agent user cannot see it", **fields)
    if status == 429:
        wait = f"wait {retry_after:.0f} s" if retry_after is not None else "back off"
        return GraphThrottled(
            f"{what}: throttled; {wait} before calling again", retry_after=retry_after, **fields
        )
    if status >= 500:
        unknown = not idempotent
        tail = (
            "; it may have been carried out, do not repeat it blindly"
            if unknown
            else " after retries"
        )
        return GraphServerError(f"{what}{tail}", outcome_unknown=unknown, **fields)
    return GraphError(what, **fields)
