"""Who wrote a chat message, a person or the agent itself: the one rule the chat poll and the read tools share.

Agent-user mode: the agent posts as its own user, so its messages are known by that user's UPN or object
id, never by display name (``service.domain.filters.is_agent_sender``).

Delegated mode: the agent posts as the signed-in person, so Graph shows the agent's messages and the
person's own under one identity. The fleet records what the agent sent (``service.ledger.memory.sent_messages``,
read by every replica), and a message of the person's is, in order:

1. the agent's, when its id is in the record;
2. undecided, while a send of the agent's in that chat is in flight and began before the message was
   created (less ``SEND_CLOCK_SKEW``, for clocks that differ): its id may not be recorded yet. The
   caller decides nothing past it until the send settles (a moment) or its entry expires. Undecided
   too while the record cannot be read at all;
3. the agent's, when its text starts with the ``[EntraBot]`` prefix every agent post carries: a replica
   that died between posting and recording left no id, and the agent's own words must never come back
   to it as the person's, a sponsor's, instruction. A person who types that prefix themselves is taken
   for the agent (docs/configuration.md says so);
4. the person's.

System messages (events, apps, no ``from.user``) are nobody's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from service.domain.filters import html_to_text, is_agent_sender, is_person_message
from service.domain.identity import same_identifier
from service.domain.agent import AgentUser
from service.graph.models import ChatMessage

# Delegated mode posts as the signed-in human; the prefix tells people which messages the agent wrote.
DELEGATED_PREFIX = "[EntraBot] "
# A send's start is stamped by the replica's clock, a message's creation by Graph's.
SEND_CLOCK_SKEW = timedelta(minutes=1)


class Author(str, Enum):
    PERSON = "person"
    AGENT = "agent"
    SYSTEM = "system"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class SentView:
    """What the fleet's record says of one chat: the ids the agent posted there, and when each send still
    in flight began. Empty in agent-user mode, where the agent's identity says it all."""

    ids: frozenset[str] = frozenset()
    in_flight_since: tuple[datetime, ...] = ()
    readable: bool = (
        True  # False: the record could not be read, so no message of the person is placed
    )

    @classmethod
    def unreadable(cls) -> SentView:
        return cls(readable=False)


def author_of(message: ChatMessage, agent: AgentUser, sent: SentView) -> Author:
    sender = message.sender
    if not is_person_message(message) or sender is None:
        return Author.SYSTEM
    if message.id in sent.ids:
        return Author.AGENT
    if not agent.posts_as_person:
        agent_wrote = is_agent_sender(sender, agent_upn=agent.upn, agent_object_id=agent.object_id)
        return Author.AGENT if agent_wrote else Author.PERSON
    if not same_identifier(sender.id, agent.object_id):
        return Author.PERSON  # someone else in the chat: the agent never posts as them
    if not sent.readable or any(
        since - SEND_CLOCK_SKEW <= message.created_date_time for since in sent.in_flight_since
    ):
        return Author.UNDECIDED
    if _prefixed(message):
        return Author.AGENT
    return Author.PERSON


def posted_as_agent_identity(messages: Iterable[ChatMessage], agent: AgentUser) -> list[str]:
    """The ids of messages whose sender is the agent's identity: in delegated mode the ones whose
    authorship needs the fleet's record (the signed-in person's); none in agent-user mode."""
    if not agent.posts_as_person:
        return []
    return [
        m.id
        for m in messages
        if m.sender is not None
        and is_person_message(m)
        and same_identifier(m.sender.id, agent.object_id)
    ]


@dataclass(frozen=True)
class PeopleMessages:
    people: list[ChatMessage] = field(default_factory=list)  # in the order given
    undecided: bool = False  # some message waits for a send in flight: decide nothing past it yet


def people_messages(
    messages: Sequence[ChatMessage], agent: AgentUser, sent: SentView
) -> PeopleMessages:
    authors = [author_of(m, agent, sent) for m in messages]
    return PeopleMessages(
        [m for m, a in zip(messages, authors, strict=True) if a is Author.PERSON],
        any(a is Author.UNDECIDED for a in authors),
    )


def _prefixed(message: ChatMessage) -> bool:
    body = message.body
    text = html_to_text(body.content) if body.content_type == "html" else body.content
    return text.lstrip().startswith(DELEGATED_PREFIX.strip())
