"""Teams teams and channels (``/me/joinedTeams``, ``/teams/{id}/channels``) and channel messages
(``/teams/{id}/channels/{id}/messages``): discovery, reading what changed, and posting as the agent user.

Graph facts (read, not run here: no tenant): "List joinedTeams" answers id, displayName and description
only, and a delegated token only for the signed-in user; "List channels" hides private channels from
non-members; "chatMessage: delta" lists root messages "without the replies", takes ``$filter`` on
lastModifiedDateTime with ``gt`` only, ``$expand=replies`` and ``$top`` up to 50, and its filter
"will fetch any reply chain (each channel post message and associated reply messages) created or
changed after the specified date time". Permissions (delegated): Team.ReadBasic.All,
Channel.ReadBasic.All, ChannelMessage.Read.All, ChannelMessage.Send.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Sequence
from datetime import datetime

from service.graph.models import OutboundMention
from service.graph.pages import Page
from service.graph.team_models import Channel, ChannelMessage, ChannelThread, Team
from service.graph.transport import GraphTransport
from service.graph.urls import MAX_TOP, check_top, graph_timestamp

_KIND = "channel message"


class GraphChannels:
    def __init__(self, transport: GraphTransport) -> None:
        self._t = transport

    async def joined_teams(self, user_id: str | None = None) -> list[Team]:
        """The teams the user is a direct member of: the signed-in user's when ``user_id`` is None
        (a delegated token may ask for no one else's)."""
        url, route = (
            self._t.urls.url("me/joinedTeams")
            if user_id is None
            else self._t.urls.url("users/{}/joinedTeams", user_id)
        )
        return await self._t.collect(url, route, Team, "team", max_pages=5)

    async def list_channels(self, team_id: str) -> list[Channel]:
        """The team's channels the agent user can see; a channel added since the last call is here."""
        url, route = self._t.urls.url("teams/{}/channels", team_id)
        return await self._t.collect(url, route, Channel, "channel", max_pages=5)

    async def changed_since(
        self, team_id: str, channel_id: str, since: datetime, *, max_pages: int = 10
    ) -> AsyncGenerator[Page[ChannelMessage], None]:
        """Pages of every root message and reply modified after ``since``, roots before their replies,
        each reply with ``reply_to_id`` naming its root (``threads_changed_since``, flattened)."""
        async for page in self.threads_changed_since(
            team_id, channel_id, since, max_pages=max_pages
        ):
            yield Page(tuple(flatten_threads(page.items, since)), page.next_link, page.skipped)

    async def threads_changed_since(
        self, team_id: str, channel_id: str, since: datetime, *, max_pages: int = 10
    ) -> AsyncGenerator[Page[ChannelThread], None]:
        """Pages of the threads with a root or a reply modified after ``since``, each root with all
        its replies (what a reader needs to tell whose thread a new reply is in).

        One delta round with ``$filter=lastModifiedDateTime gt since`` and ``$expand=replies``: a new
        reply moves its root's lastModifiedDateTime (the reply-chain sentence of "chatMessage: delta";
        the emulator models it), so the root comes back with every reply. A root malformed in any part
        is skipped whole (``skipped``), so a caller can decide not to move its cursor past it.
        """
        params: dict[str, str | int] = {
            "$filter": f"lastModifiedDateTime gt {graph_timestamp(since)}",
            "$expand": "replies",
            "$top": MAX_TOP,
        }
        url, route = self._t.urls.url(
            "teams/{}/channels/{}/messages/delta", team_id, channel_id, params=params
        )
        async for page in self._t.pages(url, route, ChannelThread, _KIND, max_pages):
            yield page

    async def get_message(self, team_id: str, channel_id: str, message_id: str) -> ChannelMessage:
        return await self._t.get_one(
            ChannelMessage,
            _KIND,
            "teams/{}/channels/{}/messages/{}",
            team_id,
            channel_id,
            message_id,
        )

    async def list_messages(
        self, team_id: str, channel_id: str, top: int = MAX_TOP
    ) -> list[ChannelMessage]:
        """The most recent root messages (one page of at most ``top``; replies not included)."""
        url, route = self._t.urls.url(
            "teams/{}/channels/{}/messages", team_id, channel_id, params={"$top": check_top(top)}
        )
        return await self._t.collect(url, route, ChannelMessage, _KIND, max_pages=1)

    async def list_threads(
        self, team_id: str, channel_id: str, top: int = MAX_TOP
    ) -> list[ChannelThread]:
        """The most recent root messages with their replies (``$expand=replies``; Graph expands at
        most 1000 replies a root), one page of at most ``top``."""
        url, route = self._t.urls.url(
            "teams/{}/channels/{}/messages",
            team_id,
            channel_id,
            params={"$top": check_top(top), "$expand": "replies"},
        )
        return await self._t.collect(url, route, ChannelThread, _KIND, max_pages=1)

    async def list_replies(
        self, team_id: str, channel_id: str, root_id: str, top: int = MAX_TOP
    ) -> list[ChannelMessage]:
        """The newest replies to a root message (one page of at most ``top``)."""
        url, route = self._t.urls.url(
            "teams/{}/channels/{}/messages/{}/replies",
            team_id,
            channel_id,
            root_id,
            params={"$top": check_top(top)},
        )
        return await self._t.collect(url, route, ChannelMessage, _KIND, max_pages=1)

    async def post_message(
        self, team_id: str, channel_id: str, html: str, mentions: Sequence[OutboundMention] = ()
    ) -> ChannelMessage:
        """Post a root message as the agent user. Never re-sent after a 5xx or a lost answer (the
        error then has ``outcome_unknown`` set)."""
        url, route = self._t.urls.url("teams/{}/channels/{}/messages", team_id, channel_id)
        return await self._send(url, route, html, mentions)

    async def post_reply(
        self,
        team_id: str,
        channel_id: str,
        root_id: str,
        html: str,
        mentions: Sequence[OutboundMention] = (),
    ) -> ChannelMessage:
        """Reply to a root message as the agent user; not re-sent, as ``post_message``."""
        url, route = self._t.urls.url(
            "teams/{}/channels/{}/messages/{}/replies", team_id, channel_id, root_id
        )
        return await self._send(url, route, html, mentions)

    async def _send(
        self, url: str, route: str, html: str, mentions: Sequence[OutboundMention]
    ) -> ChannelMessage:
        body: dict[str, object] = {"body": {"contentType": "html", "content": html}}
        if mentions:
            body["mentions"] = [m.to_graph() for m in mentions]
        response = await self._t.request("POST", url, route=route, json=body, idempotent=False)
        return self._t.item(response, ChannelMessage, _KIND, route)


def flatten_threads(threads: Iterable[ChannelThread], since: datetime) -> Iterable[ChannelMessage]:
    """The roots and replies modified after ``since``, roots before their replies, each reply's
    ``reply_to_id`` naming its root."""
    for thread in threads:
        if thread.modified_or_created > since:
            yield thread.model_copy(update={"replies": ()})
        for reply in thread.replies:
            if reply.modified_or_created > since:
                yield (
                    reply
                    if reply.reply_to_id
                    else reply.model_copy(update={"reply_to_id": thread.id})
                )
