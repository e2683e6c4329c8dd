"""Every inbound delivery lands in the interaction log (the agent's memory of what reached it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from service.delivery.hub import Dispatch, DispatchOutcome
from service.clock import Clock, utc_now
from service.ledger.memory.interactions import (
    Action,
    Channel,
    Direction,
    Interaction,
    InteractionLog,
)


@dataclass
class DeliveryRecorder:
    log: InteractionLog
    replica_id: str
    clock: Clock = utc_now

    async def delivered(self, dispatches: Sequence[Dispatch]) -> None:
        for dispatch in dispatches:
            message = dispatch.message
            delivered = dispatch.outcome is DispatchOutcome.DELIVERED
            await self.log.record(
                Interaction(
                    ts=self.clock(),
                    direction=Direction.IN,
                    channel=Channel.of(message.source),
                    action=Action.DELIVERED.value if delivered else Action.RECEIVED.value,
                    chat_id=message.chat_id,
                    message_id=message.message_id,
                    sender=message.sender_id,
                    summary=message.subject or "",
                    body=message.body,
                    extra=(
                        # The name the push showed (Graph's displayName of the sender), so what is
                        # read back (catch_up) names the sender as the push did, not by object id.
                        ("sender_name", json.dumps(message.sender_name)),
                        ("replica", json.dumps(self.replica_id)),
                        ("via", json.dumps(dispatch.channel or "none")),
                        *(
                            (("target", json.dumps(dispatch.target_id)),)
                            if dispatch.target_id
                            else ()
                        ),
                    ),
                )
            )
