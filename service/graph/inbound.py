"""Graph payloads → the delivery layer's InboundMessage (the edge between the two vocabularies)."""

from __future__ import annotations

from service.domain.filters import html_to_text
from service.domain.message import EMAIL_CHAT_ID, InboundMessage, Source
from service.domain.sponsors import SponsorGate
from service.graph.models import ChatMessage, ItemBody, MailMessage


def body_text(body: ItemBody) -> str:
    return html_to_text(body.content) if body.content_type == "html" else body.content


def chat_inbound(
    message: ChatMessage,
    chat_id: str,
    gate: SponsorGate | None,
    source: Source = Source.CHAT,
) -> InboundMessage:
    """A chat message, or with ``source`` CHANNEL a channel message (``chat_id`` its channel's id: no
    chat shows a sponsor's other accounts there, so only a sponsor's own object id counts)."""
    sender = message.sender
    sender_id = sender.id if sender is not None else ""
    return InboundMessage(
        source=source,
        chat_id=chat_id,
        message_id=message.id,
        sender_id=sender_id,
        sender_name=(sender.display_name if sender is not None else None) or sender_id,
        created=message.created_date_time,
        body=body_text(message.body),
        sender_is_sponsor=gate is not None and gate.is_sponsor(sender_id, chat_id),
        sender_is_directory_sponsor=gate is not None and gate.is_directory_sponsor(sender_id),
    )


def mail_inbound(mail: MailMessage) -> InboundMessage:
    # Every email push is wrapped whoever sent it (SPEC §5), so mail never claims sponsor status.
    address = (mail.sender.address if mail.sender else None) or ""
    name = (mail.sender.name if mail.sender else None) or address
    return InboundMessage(
        source=Source.EMAIL,
        chat_id=EMAIL_CHAT_ID,
        message_id=mail.id,
        sender_id=address,
        sender_name=name,
        created=mail.received_date_time,
        body=body_text(mail.body),
        subject=mail.subject,
    )
