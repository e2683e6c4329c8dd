"""@mentions in what the agent posts: ``@{0}`` in the text becomes ``<at id="…">Name</at>`` for that member.

The model names the people to mention (``mentions``: UPNs or object ids of the chat's members) and
marks where each goes with ``@{n}``, n its place in that list. Only members of the chat can be
mentioned (a mention notifies; the agent must not page people outside the conversation), and every
listed person must be placed, so nobody is notified by a tag the text does not show. A text body is
escaped into HTML, since Graph carries mentions only in HTML bodies; names come from the directory
and are escaped too.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from service.graph.models import ChatMember, OutboundMention

TOKEN = re.compile(r"@\{(\d+)\}")
MAX_MENTIONS = 20


class MentionError(ValueError):
    """The text and the mentions do not fit together; the message says how to fix the call."""


@dataclass(frozen=True)
class Composed:
    content: str
    content_type: Literal["text", "html"]
    mentions: tuple[OutboundMention, ...] = ()


def member_for(ref: str, members: Sequence[ChatMember]) -> ChatMember | None:
    """The chat member ``ref`` names, by object id or by address (UPN or mail), ignoring case."""
    wanted = ref.strip().lower()
    for member in members:
        if member.user_id and member.user_id.lower() == wanted:
            return member
        if member.email and member.email.lower() == wanted:
            return member
    return None


def text_as_html(text: str) -> str:
    """Plain text as an HTML body shows it: escaped, its line breaks kept."""
    return html.escape(text).replace("\n", "<br>")


def compose(
    text: str, content_type: Literal["text", "html"], mentioned: Sequence[ChatMember]
) -> Composed:
    """The body to post: ``text`` as is when nobody is mentioned, else HTML with an <at> tag per ``@{n}``."""
    used = {int(n) for n in TOKEN.findall(text)}
    if not mentioned:
        if used:
            raise MentionError(
                "the text has @{n} marks but mentions is empty; list the people to mention"
            )
        return Composed(text, content_type)
    unknown = sorted(n for n in used if n >= len(mentioned))
    if unknown:
        raise MentionError(
            f"@{{{unknown[0]}}} has no person: mentions lists {len(mentioned)} (use @{{0}} to "
            f"@{{{len(mentioned) - 1}}})"
        )
    unplaced = sorted(set(range(len(mentioned))) - used)
    if unplaced:
        raise MentionError(
            f"mentions[{unplaced[0]}] is never placed in the text; write @{{{unplaced[0]}}} where "
            "they are to be mentioned"
        )
    body = text if content_type == "html" else text_as_html(text)
    tags: list[OutboundMention] = []

    def tag(match: re.Match[str]) -> str:
        member = mentioned[int(match.group(1))]
        name = html.escape(member.display_name or member.email or "someone")
        tags.append(OutboundMention(len(tags), name, member.user_id or ""))
        return f'<at id="{tags[-1].id}">{name}</at>'

    return Composed(TOKEN.sub(tag, body), "html", tuple(tags))
