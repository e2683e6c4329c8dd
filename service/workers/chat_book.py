"""The chats this replica polls: one ChatPollState per chat, and which of them must be read.

A want (a hint taken, a doubt of our own) stays on its chat's state until a read satisfies it
(service.workers.chat_wants says when). The book indexes the chats that have one, so a cycle finds
what is due without walking every watched chat (10,000 in the scale tests).
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field

from service.workers.chat_state import ChatPollState
from service.workers.chat_wants import Behind, WantedRead


@dataclass
class ChatBook:
    _states: dict[str, ChatPollState] = field(default_factory=dict)
    _wanting: set[str] = field(default_factory=set)
    _behind: set[str] = field(default_factory=set)
    _unserved_look_at: float = float("-inf")

    def state_of(self, chat_id: str) -> ChatPollState:
        state = self._states.get(chat_id)
        if state is None:
            state = self._states[chat_id] = ChatPollState(chat_id)
        return state

    def made_here(self, chat_id: str) -> bool:
        """create_chat made the chat on this replica: here its newest surfaces whatever its age."""
        state = self._states.get(chat_id)
        return state is not None and state.surface_newest_regardless_of_age

    def untracked(self, chats: Iterable[str]) -> set[str]:
        """The chats of ``chats`` this replica has never looked at."""
        return set(chats) - self._states.keys()

    # --- wants ---

    def wanted(self, chat_id: str) -> WantedRead | None:
        state = self._states.get(chat_id)
        return state.wanted if state is not None else None

    def want(self, chat_id: str, wanted: WantedRead) -> None:
        """One want per chat: a new one merges with the one already there."""
        state = self.state_of(chat_id)
        state.wanted = wanted.merged(state.wanted)
        self._wanting.add(chat_id)

    def want_unless_wanted(self, chat_id: str, wanted: WantedRead) -> None:
        if chat_id not in self._wanting:
            self.want(chat_id, wanted)

    def settle(self, chat_id: str, wanted: WantedRead, started: float | None = None) -> None:
        """The read satisfied the want unless a newer hint came after the read started."""
        state = self._states.get(chat_id)
        if state is None or state.wanted is not wanted:
            return
        if started is None or wanted.learned_at <= started:
            state.wanted = None
            self._wanting.discard(chat_id)

    def due(self, now: float, watched: Container[str]) -> list[str]:
        """The watched chats whose want may be acted on now, in a stable order."""
        return sorted(
            c
            for c in self._wanting
            if c in watched and (w := self._states[c].wanted) is not None and w.not_before <= now
        )

    def first_sights_pending(self) -> int:
        return sum(
            1
            for c in self._wanting
            if (w := self._states[c].wanted) is not None and w.first_sight_only
        )

    def hinted_wants(self) -> int:
        """Chats with a want beyond a first sight: a change hinted (most likely a new message) or a
        message left for a target, not read yet."""
        return sum(
            1
            for c in self._wanting
            if (w := self._states[c].wanted) is not None and not w.first_sight_only
        )

    def unserved_look_due(self, now: float, every_s: float) -> bool:
        """Whether a replica without a target should look at its wants' cursors now (every ``every_s``)."""
        if now < self._unserved_look_at:
            return False
        self._unserved_look_at = now + every_s
        return True

    # --- messages left for another target ---

    def leave_behind(self, chat_id: str, behind: Behind) -> None:
        self.state_of(chat_id).behind = behind
        self._behind.add(chat_id)

    def caught_up(self, chat_id: str) -> None:
        state = self._states.get(chat_id)
        if state is not None:
            state.behind = None
        self._behind.discard(chat_id)

    def reconsider_behind(self, generation: int, now: float, retry_s: float) -> None:
        """A chat that left a message for a target we lacked is read again once our targets changed,
        or a while later (another replica's target may have taken it, or a sponsor wait started)."""
        for chat_id in sorted(self._behind):
            behind = self._states[chat_id].behind
            assert behind is not None
            if behind.generation != generation or now >= behind.since + retry_s:
                self.caught_up(chat_id)
                self.want(chat_id, WantedRead(behind.newest, None, False, now))
