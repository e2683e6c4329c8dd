"""One chat read's claim: what our targets can take is claimed in the fleet's cursor and pushed.

It claims only what this replica's targets can take; the rest is left for another replica's target
or a sponsor wait that starts later (the poll remembers it as "behind"). What nobody delivers (the
agent's own replies, system messages) is recorded as decided, so no other replica reads the chat
for the hints it raised (issue 23 item 8).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from service.clock import later
from service.delivery.hub import DeliveryHub
from service.domain.message import InboundMessage
from service.delivery.permission_verdict import parse_verdict
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.claims.chat_claim_types import CursorRead
from service.ledger.claims.claim_intent import ClaimIntent
from service.ledger.memory.permission_requests import PermissionRequests, Standing
from service.workers.chat_state import ChatPhase, ChatRead, OfferedMessage, decide_offer
from service.workers.recorder import DeliveryRecorder


@dataclass(frozen=True)
class ChatClaimer:
    ledger: ChatLedger[OfferedMessage]
    hub: DeliveryHub
    recorder: DeliveryRecorder
    permissions: PermissionRequests | None = None  # pending permission requests of the fleet
    # Writes what an acknowledging host is owed into its record before each claim write.
    intent: ClaimIntent[OfferedMessage] | None = None

    async def takeable(self, messages: Iterable[InboundMessage]) -> frozenset[str]:
        """The ids of ``messages`` a target of this replica's would take now."""
        offered = await self._without_verdicts_held_elsewhere(list(messages))
        return frozenset(m.message_id for m in self.hub.claimable(offered))

    async def claim(
        self, read: ChatRead, takeable: frozenset[str], *, cursor: CursorRead | None = None
    ) -> datetime | None:
        """Claim and push what ``takeable`` allows; the newest creation time among the messages no
        target here could take (left for another), or None. ``cursor``: the fleet's cursor as read just
        before ``read`` (the claim writes against it instead of reading it again)."""
        if read.first_sight:
            return await self._claim_first_sight(read, takeable, cursor)
        return await self._claim_steady(read, takeable, cursor)

    async def _claim_first_sight(
        self, read: ChatRead, takeable: frozenset[str], cursor: CursorRead | None
    ) -> datetime | None:
        state, (newest,) = read.state, read.messages
        if newest.id not in takeable:
            return newest.created  # a replica holding a target that can take it will surface it
        # Only into a chat that still has no cursor: a replica that wrote one meanwhile may have left
        # messages between its watermark and this one unclaimed, for its own host.
        claim = await self.ledger.claim(
            state.chat_id, [newest], newest.created, new_chat=True, intent=self.intent, known=cursor
        )
        await self._deliver(claim.won)
        if claim.may_advance:
            state.phase = ChatPhase.NEEDS_RESOLUTION  # adopt whatever the fleet's cursor now says
        return None

    async def _claim_steady(
        self, read: ChatRead, takeable: frozenset[str], cursor: CursorRead | None
    ) -> datetime | None:
        state = read.state
        offer = decide_offer(read.messages, takeable)
        if not offer.candidates:
            if not offer.blocked:
                # Only system or own messages: nothing to claim, and nothing anyone else must deliver.
                await self._record_decided(read, offer.seen_up_to, cursor)
            return offer.left
        # If the write's outcome is unknown, the ledger keeps these messages with it and returns them
        # from the call that settles it as ours.
        claim = await self.ledger.claim(
            state.chat_id,
            offer.candidates,
            offer.seen_up_to,
            advance_watermark=not offer.blocked,
            intent=self.intent,
            known=cursor,
        )
        await self._deliver(claim.won)
        if claim.may_advance:
            state.watermark = later(state.watermark, offer.seen_up_to)
        return offer.left

    async def _record_decided(
        self, read: ChatRead, seen_up_to: datetime | None, cursor: CursorRead | None
    ) -> None:
        """Record messages nobody delivers in the fleet's cursor, as a claim of them: its watermark and
        ids then cover the hints they raise, so the other replicas take them from the cursor instead of
        each reading the chat. The same compare-and-swap and settling rules as any claim; only after a
        complete read, so the watermark never passes a person's message beyond the page budget that
        some replica must still deliver."""
        state = read.state
        if seen_up_to is None or not read.complete:
            state.watermark = later(state.watermark, seen_up_to)
            return
        claim = await self.ledger.claim(
            state.chat_id, read.messages, seen_up_to, intent=self.intent, known=cursor
        )
        await self._deliver(
            claim.won
        )  # what an earlier claim in doubt settled as ours; never these
        if claim.may_advance:
            state.watermark = later(state.watermark, seen_up_to)

    async def _without_verdicts_held_elsewhere(
        self, messages: list[InboundMessage]
    ) -> list[InboundMessage]:
        """``messages`` less the sponsors' verdicts on live permission requests that only another target
        can hand back (another replica's host, or this replica's asking host while its stream is down)."""
        if self.permissions is None:
            return messages
        kept: list[InboundMessage] = []
        for message in messages:
            verdict = parse_verdict(message.body) if message.sender_is_directory_sponsor else None
            if verdict is not None:
                standing = await self.permissions.standing(verdict.request_id)
                # A verdict delivered as an ordinary message could never reach the host that asked:
                # while its request is live it waits for that host's target (here, after a stream
                # reconnect, or on the replica holding it); unknown standing waits for a later cycle.
                if standing is Standing.HELD_HERE and not self.hub.has_permission_target_for(
                    message
                ):
                    continue
                if standing in (Standing.HELD_ELSEWHERE, Standing.UNRESOLVED):
                    continue
            kept.append(message)
        return kept

    async def _deliver(self, won: Sequence[OfferedMessage]) -> None:
        """Push what the claim made ours: messages of this read, or those of an earlier claim whose
        uncertain write this claim settled as ours."""
        messages = [m.inbound for m in won if m.inbound is not None]
        if messages:
            dispatches = await self.hub.dispatch(messages)
            await self.recorder.delivered(dispatches)
