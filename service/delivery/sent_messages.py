"""The Graph ids of chat messages this replica posted, owned by one object the tools write and the poll reads.

In delegated mode Graph attributes the agent's posts to the human it acts for, so only these ids keep
the chat poll from surfacing the agent's own words as inbound. The send tool records an id before it
awaits anything else; the poll and the read tools only ask whether an id is one of ours.
"""

from __future__ import annotations

from collections.abc import Iterator


class SentMessages:
    """Ids of messages this replica sent, for the lifetime of the process (a set: ids arrive once)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def record(self, message_id: str) -> None:
        self._ids.add(message_id)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)
