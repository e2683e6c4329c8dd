"""Where a message comes from: a Teams chat, a team's channel, or the agent's mailbox — the one spelling
of "chat, channel or mail".

The value (``chat`` / ``channel`` / ``email``) is what the interaction log stores and the hub and push use. Two older
vocabularies stay on the wire and in stored records, so each is a property here rather than an enum of
its own: the XPIA envelope says ``teams`` for a chat and a channel (the word hosts' prompts were written against), and
the subscriptions record and its metric label say ``mail`` (alerts are written against those label
values; tests/deploy checks them).
"""

from __future__ import annotations

from enum import Enum


class Source(str, Enum):
    CHAT = "chat"
    CHANNEL = "channel"
    EMAIL = "email"

    @property
    def envelope_word(self) -> str:
        """The ``source=`` word of the external-content envelope."""
        return "email" if self is Source.EMAIL else "teams"

    @property
    def subscription_name(self) -> str:
        """The key of its change-notification subscription in the stored record, and its metric label."""
        return "mail" if self is Source.EMAIL else self.value

    @classmethod
    def from_subscription_name(cls, name: str) -> Source | None:
        """The source a stored subscription key names; None for a key from another version."""
        return next((s for s in cls if s.subscription_name == name), None)
