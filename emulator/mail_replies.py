"""What Outlook makes of a reply, a reply-all or a forward: its recipients, subject and quoted body.

Graph's ``message: reply`` / ``replyAll`` / ``forward`` (v1.0; read, not run: no tenant) send at once and
save to Sent Items; the caller gives a ``comment`` (or the ``body`` of a ``message`` parameter, never
both: 400), and Outlook builds the rest from the original. Documented: reply goes to the original's
``replyTo`` when set, else to its sender; reply-all to those and all other recipients; forward to the
``toRecipients`` parameter or the message parameter's ``toRecipients`` (exactly one of them: 400 otherwise).
Not documented, so modelled on what Outlook shows people: the subject prefixed ``RE: `` / ``FW: `` (not
twice), and an HTML body holding the comment, then a header block of the original (From, Sent, To,
Subject) and the original's body; the comment is read as text and escaped.
"""

from __future__ import annotations

import html
from typing import Literal

from emulator.state import Address, MailMessage
from emulator.timestamps import outlook_time

ReplyKind = Literal["reply", "replyAll", "forward"]
_PREFIX = {"reply": "RE: ", "replyAll": "RE: ", "forward": "FW: "}


def answer_subject(kind: ReplyKind, subject: str) -> str:
    prefix = _PREFIX[kind]
    return subject if subject.lower().startswith(prefix.lower()) else prefix + subject


def reply_recipients(
    kind: Literal["reply", "replyAll"], original: MailMessage, me: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(to, cc) of a reply to ``original`` by the mailbox whose address is ``me``: never the replier
    itself. A reply to one's own sent mail goes to its recipients, as Outlook does."""
    mine = me.lower()
    sender = original.sender.address
    if sender.lower() == mine:
        to = [a.address for a in original.to]
    else:
        to = [sender] + ([a.address for a in original.to] if kind == "replyAll" else [])
    cc = [a.address for a in original.cc] if kind == "replyAll" else []
    return _distinct(to, mine), _distinct(cc, mine, *(a.lower() for a in to))


def quoted_body(original: MailMessage, comment: str) -> str:
    """The comment, then the original as Outlook quotes it (every value of the original escaped)."""
    said = html.escape(comment).replace("\n", "<br>")
    original_body = original.body if original.content_type == "html" else html.escape(original.body)
    recipients = "; ".join(_named(a) for a in original.to)
    return (
        f'<html><body><div>{said}</div><hr style="display:inline-block;width:98%">'
        f'<div id="divRplyFwdMsg"><b>From:</b> {_named(original.sender)}<br>'
        f"<b>Sent:</b> {outlook_time(original.sent)}<br><b>To:</b> {recipients}<br>"
        f"<b>Subject:</b> {html.escape(original.subject)}</div><div>{original_body}</div></body></html>"
    )


def _named(address: Address) -> str:
    return html.escape(f"{address.name} <{address.address}>")


def _distinct(addresses: list[str], *excluded: str) -> tuple[str, ...]:
    seen = set(excluded)
    kept = []
    for address in addresses:
        if address.lower() not in seen:
            seen.add(address.lower())
            kept.append(address)
    return tuple(kept)
