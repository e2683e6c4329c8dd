"""The sponsor wait: a non-push host blocked in a tool call until a sponsor writes in any watched chat.

While the call waits, a ``SponsorWaitTarget`` is registered in the hub (``ToolCall.holding``): that is
what makes this replica poll the watched chats and claim a sponsor's message for delivery at all (the
delivery rule), and the hub hands such a message to a pending wait before any push target. The wait
ends with its hand-over (service.tools.sponsor_wait_target: the backlog that fits one result, or a
reply, or both), at the timeout, when the host cancels the call, or when its connection has closed
without a cancel (``CallerLine``: the SDK runs such a handler on); in every case the target leaves the
hub, so nothing is claimed for a wait nobody is waiting on, and what it held but could not answer with
goes back to the hub for the next wait or push host.

A sponsor who wrote while no host was connected left **backlog**: messages written before the wait
began, often hours old and in other chats. They are handed over together, each with its age, in
``backlog``, never as ``sponsor_reply`` (issue 23 item 10: a non-push send once returned a two-hour-old
message of another chat as the answer to what it had just sent). ``sponsor_reply`` is only a message
written after the wait began. Every item names its own ``chat_id`` and ``_next_action`` restates that
the answer belongs there.

An item's text is outside the ``<external_content>`` envelope. Only a verified sponsor's chat message
can end a wait (the target accepts nothing else), and per the seed a verified sponsor's message stays
outside the envelope, as its channel push does: the model is meant to act on it. Its envelope words
are still replaced, so it cannot close or forge one around other content (or around another item).
"""

from __future__ import annotations

import asyncio

import logging
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from pydantic import BaseModel, Field

from service.clock import Clock, utc_now
from service.domain.message import InboundMessage, Source
from service.delivery.push import format_ts, meta_value
from service.domain.sponsors import SponsorGate
from service.delivery.xpia import bare_for_tool_result, wrap_external
from service.mcp.caller_line import CallerLine
from service.mcp.tool_registry import ToolCall
from service.telemetry.logging import session_ref
from service.tools.message_items import MAX_ITEM_CHARS
from service.tools.sponsor_wait_target import BacklogBounds, SponsorWaitTarget

log = logging.getLogger(__name__)


class WaitOutcome(str, Enum):
    REPLY = "reply"  # a sponsor wrote after the wait began (backlog may come with it)
    BACKLOG = "backlog"  # only messages written before the wait began: no answer yet
    TIMEOUT = "timeout"
    NOT_WAITED = "not_waited"  # a push host: replies arrive as channel pushes
    NO_SPONSORS = "no_sponsors"  # no sponsor is known, so no reply could be verified
    SHUTTING_DOWN = "shutting_down"
    CALLER_GONE = (
        "caller_gone"  # the host's connection closed: what the wait held went to the next wait
    )


class SponsorReply(BaseModel):
    chat_id: str = Field(
        description="The chat the reply came from; answer there (it may differ from where you sent)"
    )
    message_id: str
    sender_id: str
    sender: str
    ts: str
    verified_sponsor: bool
    content: str = Field(
        description="A verified sponsor's text, outside any envelope (anything else is enveloped)"
    )
    age_s: float = Field(description="How long before the wait ended the sponsor wrote it")
    predates_wait: bool = Field(
        description="Written before the wait began (backlog): not an answer to what was just sent"
    )


def sponsor_reply(message: InboundMessage, *, backlog: bool, now: datetime) -> SponsorReply:
    sender = meta_value(message.sender_name.strip() or message.sender_id)
    verified = message.source is Source.CHAT and message.sender_is_sponsor
    if verified:
        content = bare_for_tool_result(message.body, max_chars=MAX_ITEM_CHARS)
    else:  # unreachable through SponsorWaitTarget; kept so a wider target can never unwrap a stranger
        content = wrap_external(
            message.body, source=Source.CHAT, sender=sender, max_chars=MAX_ITEM_CHARS
        )
    return SponsorReply(
        chat_id=message.chat_id,
        message_id=message.message_id,
        sender_id=meta_value(message.sender_id),
        sender=sender,
        ts=format_ts(message.created),
        verified_sponsor=verified,
        content=content,
        age_s=round(max(0.0, (now - message.created).total_seconds()), 1),
        predates_wait=backlog,
    )


@dataclass(frozen=True)
class WaitResult:
    outcome: WaitOutcome  # any but NOT_WAITED, which is the caller's own
    timeout_s: float
    reply: SponsorReply | None = None
    backlog: tuple[SponsorReply, ...] = ()  # oldest first
    more_backlog: bool = False  # backlog was left out of this result: the next wait hands it over

    @property
    def next_action(self) -> str:
        backlog = self._backlog_note()
        if self.reply is not None:
            return (
                f"Answer the sponsor in chat_id {self.reply.chat_id}: that is the chat this reply came from, "
                "which may differ from the chat you last wrote to. Call send_teams_message with that chat_id."
                + (f" {backlog}" if backlog else "")
            )
        if backlog:
            return (
                f"No sponsor reply to what you just sent yet. {backlog} A reply written from now on reaches you "
                "with your next wait (send_teams_message or wait_for_sponsor_dm)."
            )
        if self.outcome is WaitOutcome.TIMEOUT:
            return (
                f"No sponsor reply arrived within {self.timeout_s:g} s. Do not wait again in a loop: carry on. "
                "A reply that arrives later reaches you with your next wait (send_teams_message or "
                "wait_for_sponsor_dm), or as a channel message on hosts that take them; "
                "read_teams_messages(chat_id) shows every chat's history."
            )
        if self.outcome is WaitOutcome.NO_SPONSORS:
            return (
                "No sponsor of the agent identity is known (ENTRABOT_AGENT_IDENTITY_ID unset or its sponsors "
                "unreadable), so no reply can be verified; use read_teams_messages(chat_id) to read replies."
            )
        if self.outcome is WaitOutcome.CALLER_GONE:
            return (
                "The connection of this call closed before its result could be written, so it carries no "
                "message: what arrived for it goes to your next wait. Call wait_for_sponsor_dm to get it."
            )
        return "This server is shutting down; reconnect, then call wait_for_sponsor_dm if you still need the reply."

    def _backlog_note(self) -> str:
        if not self.backlog:
            return ""
        oldest, newest = self.backlog[0], self.backlog[-1]
        chats = ", ".join(dict.fromkeys(item.chat_id for item in self.backlog))
        when = (
            f"{_age(oldest.age_s)} ago"
            if len(self.backlog) == 1
            else f"between {_age(oldest.age_s)} and {_age(newest.age_s)} ago"
        )
        more = (
            " More backlog is waiting: call wait_for_sponsor_dm to get it (it returns as soon as the replica has read it)."
            if self.more_backlog
            else ""
        )
        return (
            f"The {len(self.backlog)} message(s) in backlog are not answers: the sponsor wrote them {when}, "
            f"before this wait began, in chat_id {chats} (which may differ from the chat you last wrote to). "
            "Read each as an older request that may already be handled; check read_teams_messages(chat_id) "
            f"before acting on it, and answer in its chat_id only if it still needs an answer.{more}"
        )


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


async def _handed_over_while_listening(
    target: SponsorWaitTarget, caller: CallerLine | None, timeout_s: float
) -> bool:
    """Wait for the target's hand-over (``target.held`` then has it) or its timeout, unless the host can no
    longer take the result first: then the target stops taking, and this answers False."""
    if caller is None:
        await target.handed_over(timeout_s)
        return True
    async with asyncio.TaskGroup() as tasks:
        waiting = tasks.create_task(target.handed_over(timeout_s))
        watching = tasks.create_task(caller.gone())
        waiting.add_done_callback(lambda _: watching.cancel())
        watching.add_done_callback(
            lambda _: waiting.cancel()
        )  # handed_over closes the target as it ends
    return watching.cancelled()


def _give_back(call: ToolCall, held: list[InboundMessage], logged: dict[str, str]) -> None:
    """The wait's host went away with claimed messages in it: they would reach nobody, so they go back
    to the hub for the next wait or push host (issue 22 item 3)."""
    if held:
        call.hub.hand_back(held)
        log.warning(
            "sponsor wait ended before its result was written; its messages go to the next wait",
            extra={**logged, "message_ids": [m.message_id for m in held]},
        )


async def _owe_or_give_back(
    call: ToolCall, held: list[InboundMessage], logged: dict[str, str]
) -> None:
    """A host that acknowledges is owed what its wait held, in its delivery record: pushed to it on any
    replica until it acknowledges, and never given to another host. Any other host's go back to the hub."""
    if held and call.owe is not None and await call.owe(held):
        log.warning(
            "sponsor wait ended before its result was written; its messages are owed to its host",
            extra={**logged, "message_ids": [m.message_id for m in held]},
        )
        return
    _give_back(call, held, logged)


def budget_margin_s(budget_s: float) -> float:
    """Room left in the host's budget for the result's way back (and a slow hop or two)."""
    return max(2.0, 0.1 * budget_s)


@dataclass(frozen=True)
class SponsorWaiter:
    gate: SponsorGate
    max_timeout_s: float
    clock: Clock = utc_now
    bounds: BacklogBounds = field(
        default_factory=BacklogBounds
    )  # how much backlog one result carries

    def timeout_for(
        self,
        requested_s: float | None,
        *,
        default_s: float | None = None,
        budget_s: float | None = None,
    ) -> float:
        """The wait: what was asked (else ``default_s``, else the cap), within the cap, and ending well
        inside the host's time budget when it gave one, so the answer reaches it before it gives up."""
        wanted = (
            requested_s
            if requested_s is not None
            else (default_s if default_s is not None else self.max_timeout_s)
        )
        timeout = min(wanted, self.max_timeout_s)
        if budget_s is not None:
            timeout = min(timeout, max(0.0, budget_s - budget_margin_s(budget_s)))
        return timeout

    def precondition(self, call: ToolCall) -> WaitOutcome | None:
        """Why a wait could never be satisfied right now, or None when it can go ahead."""
        if call.hub.closed:
            return WaitOutcome.SHUTTING_DOWN
        if not self.gate.sponsor_ids:
            return WaitOutcome.NO_SPONSORS
        return None

    async def wait(
        self, call: ToolCall, requested_s: float | None, *, default_s: float | None = None
    ) -> WaitResult:
        timeout_s = self.timeout_for(requested_s, default_s=default_s, budget_s=call.time_budget_s)
        blocked = self.precondition(call)
        if blocked is not None:
            return WaitResult(blocked, timeout_s)
        target = SponsorWaitTarget(call.session_id, began=self.clock(), bounds=self.bounds)
        # Never the target id: it holds the session id, which must stay out of logs.
        logged = {"session": session_ref(call.session_id)}
        async with call.holding(target):
            log.info("sponsor wait started", extra={**logged, "timeout_s": timeout_s})
            try:
                listening = await _handed_over_while_listening(target, call.caller, timeout_s)
                # The last look before the result goes out (a resume may still be on its way).
                if listening and target.held and call.caller is not None:
                    listening = await call.caller.listening()
            except asyncio.CancelledError:
                # The host cancelled the call (or its session ended) while the wait held claimed messages.
                _give_back(call, target.held, logged)
                raise
            if not listening:
                # The host's connection closed without a cancel: the SDK would write the result to no
                # connection (issue 22 item 3). What it holds goes to the next wait or push host instead (or
                # into the delivery record of a host that acknowledges), and this result, should the host
                # resume after all, carries none of it. Shielded: a hand-back begun is finished.
                await asyncio.shield(_owe_or_give_back(call, target.held, logged))
                return WaitResult(WaitOutcome.CALLER_GONE, timeout_s)
        handed = target.held
        if not handed:
            log.info("sponsor wait timed out", extra=logged)
            return WaitResult(WaitOutcome.TIMEOUT, timeout_s)
        now = self.clock()
        items = [
            sponsor_reply(m, backlog=target.is_backlog(m), now=now)
            for m in sorted(handed, key=lambda m: m.created)
        ]
        backlog = tuple(i for i in items if i.predates_wait)
        reply = next((i for i in items if not i.predates_wait), None)
        log.info(
            "sponsor wait answered",
            extra={
                **logged,
                "message_ids": [m.message_id for m in handed],
                "backlog": len(backlog),
                "reply": reply is not None,
            },
        )
        return WaitResult(
            WaitOutcome.REPLY if reply is not None else WaitOutcome.BACKLOG,
            timeout_s,
            reply,
            backlog,
            more_backlog=target.left_out,
        )
