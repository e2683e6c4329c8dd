"""Team channels as a kind of conversation: the reader a channel poll is given (ConversationReader).

One channel is one conversation (``<team id>/<channel id>``, service.domain.channel_place): its cursor,
its claims and its watermark are a chat's, and the poll, the book and the claim steps are the same
code. What differs is here:

- **What is read.** ``chatMessage: delta`` with ``$filter=lastModifiedDateTime gt <watermark>`` and
  ``$expand=replies`` (GraphChannels.threads_changed_since): a new reply moves its root's
  lastModifiedDateTime, so a reply in a thread weeks old comes back with its root, and the poll's
  creation-time rule keeps only what was written after the watermark.
- **What is the agent's to hear** (``delivers``), the safe default: a message that @mentions the agent
  user, and a reply in a thread the agent started or had answered before it; in a channel an operator
  lists (``ENTRABOT_CHANNELS_DELIVER_ALL``) every person's message. Anything else is decided like the
  agent's own: the watermark passes it and nothing is delivered. The thread is judged from the root and
  its replies as delta returns them, so a decision never needs a second read.
- **First sight never surfaces**: a channel's newest message is most likely old chatter; its cursor
  starts at the newest message of the channel, replies included (``newest``), and only what is written
  after it is delivered.

Graph facts (read, not run here): "chatMessage: delta" for channels takes delegated
ChannelMessage.Read.All, ``$top`` up to 50 and ``gt`` on lastModifiedDateTime only; "List channel
messages" lists roots without replies and "List replies" a root's replies, each page at most 50;
"chatMessageMention" names the mentioned user under ``mentioned.user``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from service.domain.channel_place import ChannelPlace, split_channel_conversation
from service.domain.message import InboundMessage, Source
from service.graph.client import GraphClient
from service.graph.errors import GraphForbidden, GraphNotFound
from service.graph.inbound import chat_inbound
from service.graph.models import ChatMessage
from service.graph.pages import Page
from service.graph.resources.channels import flatten_threads
from service.graph.team_models import ChannelMessage, ChannelThread
from service.workers.channel_names import ChannelNames

log = logging.getLogger(__name__)

# "Every message" for a cursor without a watermark (an empty channel's first sight): delta's filter
# needs a time, and nothing in Teams is older than this.
_BEGINNING = datetime(2000, 1, 1, tzinfo=timezone.utc)
# Replies read to find a channel's newest message at its first sight (one page, Graph's largest).
_REPLIES_PAGE = 50


class ThreadedMessage(ChannelMessage):
    """A channel message with what its thread said about it when read: the reader's, not Graph's."""

    thread_id: str
    thread_subject: str | None = None
    addressed: bool = False  # the agent's to hear under the channel's delivery rule


@dataclass(frozen=True)
class ChannelRules:
    """Which channel messages are the agent's to hear."""

    agent_id: str
    deliver_all: frozenset[str] = frozenset()  # channel ids where every person's message is

    def threaded(
        self, thread: ChannelThread, team_id: str, channel_id: str
    ) -> list[ThreadedMessage]:
        """The thread's root and replies, each with whether it is addressed to the agent."""
        everything = channel_id in self.deliver_all
        agent_wrote = [
            r.created_date_time for r in thread.replies if _sender_id(r) == self.agent_id
        ]
        started = _sender_id(thread) == self.agent_id

        def addressed(m: ChannelMessage, is_reply: bool) -> bool:
            if everything or any(
                x.user is not None and x.user.id == self.agent_id for x in m.mentions
            ):
                return True
            return is_reply and (started or any(at < m.created_date_time for at in agent_wrote))

        out = [
            _threaded(thread.model_copy(update={"replies": ()}), thread, addressed(thread, False))
        ]
        out += [_threaded(r, thread, addressed(r, True)) for r in thread.replies]
        return out


def _sender_id(m: ChatMessage) -> str | None:
    return m.sender.id if m.sender is not None else None


def _threaded(m: ChannelMessage, root: ChannelThread, addressed: bool) -> ThreadedMessage:
    # model_construct: the fields were validated when the page was read; this only adds the reader's.
    fields = {name: getattr(m, name) for name in ChannelMessage.model_fields}
    if fields.get("reply_to_id") is None and m.id != root.id:
        fields["reply_to_id"] = root.id
    return ThreadedMessage.model_construct(
        **fields, thread_id=root.id, thread_subject=root.subject, addressed=addressed
    )


@dataclass
class ChannelMessagesReader:
    """Team channels: ``/teams/{id}/channels/{id}/messages`` (the routes' rules are on GraphChannels)."""

    graph: GraphClient
    rules: ChannelRules
    names: ChannelNames
    first_sight_surfaces: bool = field(default=False, init=False)

    def delivers(self, message: ChatMessage) -> bool:
        # A message this reader did not judge is nobody's: fail closed.
        return isinstance(message, ThreadedMessage) and message.addressed

    async def newest(self, conversation_id: str) -> ChatMessage | None:
        """The newest message by creation, replies included: the root most recently modified (a reply
        moves it) and its newest replies, beside the newest roots."""
        team_id, channel_id = split_channel_conversation(conversation_id)
        roots = await self.graph.channels.list_messages(team_id, channel_id)
        if not roots:
            return None
        candidates: list[ChatMessage] = list(roots)
        latest = max(roots, key=lambda m: m.modified_or_created)
        if latest.modified_or_created > latest.created_date_time:
            candidates += await self.graph.channels.list_replies(
                team_id, channel_id, latest.id, top=_REPLIES_PAGE
            )
        return max(candidates, key=lambda m: (m.created_date_time, m.id))

    async def changed_since(
        self, conversation_id: str, since: datetime | None, *, max_pages: int
    ) -> AsyncIterator[Page[ChatMessage]]:
        team_id, channel_id = split_channel_conversation(conversation_id)
        after = since or _BEGINNING
        named = False
        pages = self.graph.channels.threads_changed_since(
            team_id, channel_id, after, max_pages=max_pages
        )
        try:
            async for page in pages:
                if page.items and not named:
                    await self.names.ensure(team_id, channel_id)
                    named = True
                yield Page(
                    tuple(_modified_after(page.items, self.rules, team_id, channel_id, after)),
                    page.next_link,
                    page.skipped,
                )
        except (GraphNotFound, GraphForbidden) as exc:
            # The channel was deleted, or the agent left it (or its private membership): nothing in
            # it can be read, so nothing is decided and its cursor stays where it is. Read as "nothing
            # new" rather than a failure, so the hint is settled instead of retried every few seconds
            # on every replica; the watch stops hinting it once its walk no longer finds it.
            log.info(
                "channel not readable; nothing decided in it",
                extra={"channel": conversation_id, "status": exc.status},
            )

    def inbound(self, message: ChatMessage, conversation_id: str) -> InboundMessage:
        team_id, channel_id = split_channel_conversation(conversation_id)
        team_name, channel_name = self.names.names(team_id, channel_id)
        thread = message if isinstance(message, ThreadedMessage) else None
        # No sponsor's word is taken from a channel (no gate): every channel message is enveloped,
        # and none decides a permission request (the channel poll has no permission requests).
        place = ChannelPlace(
            team_id=team_id,
            channel_id=channel_id,
            thread_id=thread.thread_id if thread is not None else message.reply_to_id or message.id,
            team_name=team_name,
            channel_name=channel_name,
            thread_subject=thread.thread_subject if thread is not None else None,
        )
        return replace(chat_inbound(message, conversation_id, None, Source.CHANNEL), place=place)


def _modified_after(
    threads: Iterable[ChannelThread],
    rules: ChannelRules,
    team_id: str,
    channel_id: str,
    after: datetime,
) -> Iterable[ChatMessage]:
    for thread in threads:
        judged = {m.id: m for m in rules.threaded(thread, team_id, channel_id)}
        for m in flatten_threads((thread,), after):
            yield judged[m.id]
