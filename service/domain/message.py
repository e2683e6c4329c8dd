"""The inbound message a worker hands to the hub once it has won the claim."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.domain.source import Source

EMAIL_CHAT_ID = "email"  # the push meta chat_id for mail (SPEC §5)

__all__ = ["EMAIL_CHAT_ID", "InboundMessage", "MessageKey", "Source"]

MessageKey = tuple[Source, str, str]  # source, chat id, message id


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

    @property
    def key(self) -> MessageKey:
        """What names this message among all others: Teams ids are creation milliseconds, unique only
        within their chat (two chats' messages of the same millisecond share one)."""
        return (self.source, self.chat_id, self.message_id)
