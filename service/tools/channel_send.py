"""A channel post or thread reply posted once, by the rule a chat post follows (service.delivery.send_once):
a post whose outcome Graph left unknown is settled by reading back what changed in the channel since
just before the attempt, for a message the agent sent with this very text in the same place (a root, or
a reply to that root), and posted again only when it provably did not post.

The read-back is the channel's delta filtered on lastModifiedDateTime: a new reply moves its root's
lastModifiedDateTime, so a reply comes back with its root (``GraphChannels.changed_since``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from service.clock import Clock
from service.delivery.send_once import SendOnce, first_in_pages
from service.graph.client import GraphClient
from service.graph.models import OutboundMention
from service.graph.team_models import ChannelMessage
from service.tools.chat_send import (
    SETTLE_LOOKS,
    SETTLE_PAGES,
    PostOutcome,
    Posted,
    Wanted,
    comparable_text,
)


@dataclass(frozen=True)
class ChannelSender:
    graph: GraphClient
    agent_id: str  # whose messages count as ours (the agent user, or the signed-in person in delegated mode)
    clock: Clock

    async def post(
        self,
        team_id: str,
        channel_id: str,
        html: str,
        mentions: Sequence[OutboundMention] = (),
        *,
        root_id: str | None = None,
    ) -> Posted[ChannelMessage]:
        """Post a root message, or with ``root_id`` a reply to it, once; GraphError for a failure that
        posted nothing, SendUnknown when nobody can tell."""
        wanted = Wanted(comparable_text(html, "html"))
        channels = self.graph.channels

        async def attempt() -> ChannelMessage:
            if root_id is None:
                return await channels.post_message(team_id, channel_id, html, mentions)
            return await channels.post_reply(team_id, channel_id, root_id, html, mentions)

        async def look(since: datetime) -> ChannelMessage | None:
            return await first_in_pages(
                channels.changed_since(team_id, channel_id, since, max_pages=SETTLE_PAGES),
                lambda m: self._is_ours(m, wanted, root_id, since),
            )

        settled = await SendOnce(self.clock, looks=SETTLE_LOOKS).send(attempt, look)
        if settled.found is not None:
            return Posted(settled.found, PostOutcome.FOUND_AFTER_LOST_ANSWER)
        assert settled.answer is not None
        outcome = PostOutcome.POSTED_AFTER_CHECK if settled.retried else PostOutcome.POSTED
        return Posted(settled.answer, outcome)

    def _is_ours(
        self, message: ChannelMessage, wanted: Wanted, root_id: str | None, since: datetime
    ) -> bool:
        sender = message.sender.id if message.sender is not None else None
        return (
            sender == self.agent_id
            and message.reply_to_id == root_id
            and message.created_date_time >= since
            and wanted.is_in(message)
        )
