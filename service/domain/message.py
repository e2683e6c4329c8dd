"""The inbound message a worker hands to the hub once it has won the claim."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from service.domain.channel_place import ChannelPlace
from service.domain.source import Source

EMAIL_CHAT_ID = "email"  # the push meta chat_id for mail (SPEC §5)

__all__ = ["EMAIL_CHAT_ID", "InboundMessage", "MessageKey", "Source"]


class MessageKey(NamedTuple):
    """What names a message among all others, in every part of the fleet (the hub, the hosts' delivery
    records, what a host acknowledges): Teams ids are creation milliseconds, unique only within their
    chat (two chats' messages of the same millisecond share one), and mail's chat id is
    ``EMAIL_CHAT_ID``, so the pair is unique across sources too. Stored as a two-item JSON array."""

    chat_id: str
    message_id: str


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A message as the delivery layer sees it: identifiers, sender, time and the raw body text.

    ``body`` is untrusted external content. It is never logged; it only leaves this process inside an
    XPIA envelope (or bare, for a verified sponsor's chat message).
    """

    source: Source
    chat_id: str  # the Teams chat id, or EMAIL_CHAT_ID
    message_id: str
    sender_id: str  # AAD object id for chat; the address for mail
    sender_name: str
    created: datetime
    body: str
    subject: str | None = None  # mail only
    sender_is_sponsor: bool = False
    # The sender's own object id is a sponsor's (not an account matched by address): only such a
    # message may decide a permission request. Implies sender_is_sponsor.
    sender_is_directory_sponsor: bool = False
    # A team channel's message: its team, channel and thread (service.domain.channel_place).
    place: ChannelPlace | None = None

    @property
    def key(self) -> MessageKey:
        return MessageKey(self.chat_id, self.message_id)
