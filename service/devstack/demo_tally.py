"""The demo's account of what was sent and what reached a host, so its last lines add up.

Pushes can differ from what the demo sent for two expected reasons, both named in the summary:

* a first sight: when the fleet first watches a chat (discovery, at the fleet's start, host or no
  host) its newest message surfaces if a person wrote it under 24 h ago, so the demo tenant's seeded
  history shows up once per such chat (the one-on-one's 2-hour-old question, the group chat's
  30-minute-old mention);
* the stop: what was sent just before it may not have been polled yet (the demo waits a bounded
  time for those, then says how many are still in Graph).

Anything else (a pushed id seen twice) is a duplicate, and is reported as one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from service.devstack.channel_host import ReceivedPush

MAIL = "email"  # the chat_id a mail push carries in its meta
SHORT_ID = 8


def short_id(message_id: str) -> str:
    """The tail of a message id, which is where ids differ: a Teams chat message id is its creation time
    in epoch milliseconds, and a mail id's Base64 starts alike for every mail of one mailbox. Printed
    with each push, so two people sending the same text read as two messages, not a duplicate."""
    return message_id if len(message_id) <= SHORT_ID + 1 else "…" + message_id[-SHORT_ID:]


@dataclass
class DemoTally:
    sent_chat_ids: set[str] = field(default_factory=set)
    sent_mails: int = 0
    pushes: Counter[str] = field(default_factory=Counter)  # message id → times pushed
    by_replica: Counter[str] = field(default_factory=Counter)
    chat_pushes: dict[str, ReceivedPush] = field(
        default_factory=dict
    )  # first push of each chat message
    mail_ids: set[str] = field(default_factory=set)
    acknowledged: int | None = (
        None  # pushes the fleet counted delivered (acknowledged); None: not read
    )

    def sent_chat(self, message_id: str) -> None:
        self.sent_chat_ids.add(message_id)

    def sent_mail(self) -> None:
        self.sent_mails += 1

    def pushed(self, push: ReceivedPush, replica: str) -> bool:
        """Count one push; True when its message was pushed before (a duplicate)."""
        self.pushes[push.message_id] += 1
        self.by_replica[replica] += 1
        if push.chat_id == MAIL:
            self.mail_ids.add(push.message_id)
        else:
            self.chat_pushes.setdefault(push.message_id, push)
        return self.pushes[push.message_id] > 1

    @property
    def undelivered_chat(self) -> set[str]:
        return self.sent_chat_ids - self.chat_pushes.keys()

    @property
    def undelivered_mails(self) -> int:
        # sendMail answers 202 without the new message's id, so mail is matched by count; the
        # seeded mail never surfaces (a fleet's mail cursor starts at its first run).
        return max(0, self.sent_mails - len(self.mail_ids))

    @property
    def first_sight(self) -> list[ReceivedPush]:
        """Chat pushes of messages the demo did not send: the seeded history a first sight surfaced."""
        return [
            p for message_id, p in self.chat_pushes.items() if message_id not in self.sent_chat_ids
        ]

    @property
    def settled(self) -> bool:
        return not self.undelivered_chat and not self.undelivered_mails

    def summary(self) -> list[str]:
        total = sum(self.pushes.values())
        duplicated = sum(1 for n in self.pushes.values() if n > 1)
        sent = len(self.sent_chat_ids) + self.sent_mails
        delivered_sent = sent - len(self.undelivered_chat) - self.undelivered_mails
        lines = [
            f"Sent {len(self.sent_chat_ids)} chat messages and {self.sent_mails} mails; delivered {total} "
            f"pushes ({len(self.pushes)} distinct, {duplicated} duplicated):",
            f"  {delivered_sent} of the {sent} sent",
        ]
        if self.acknowledged is not None:
            lines.append(
                f"  {self.acknowledged} of the {len(self.pushes)} distinct acknowledged by their host: "
                "the fleet counts a push delivered only then, and pushes it again until it is"
            )
        surfaced = self.first_sight
        if surfaced:
            lines.append(
                f"  {len(surfaced)} from the seeded history: on first sight a chat surfaces its newest "
                "message when a person wrote it under 24 h ago"
            )
            lines += [
                f"    chat {p.chat_id[:18]}…  msg {short_id(p.message_id)}  {p.user}"
                for p in surfaced
            ]
        missing = len(self.undelivered_chat) + self.undelivered_mails
        if missing:
            lines.append(
                f"  {missing} sent but not polled before the stop ({len(self.undelivered_chat)} chat, "
                f"{self.undelivered_mails} mail); they stay in Graph"
            )
        return lines
