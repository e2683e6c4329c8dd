"""Talking to people in Teams: post a message as the agent user, and wait for a sponsor's answer.

``send_teams_message`` on a non-push host blocks after posting until a sponsor replies in any watched
chat (the sponsor wait, ``service.tools.sponsor_wait``), because such a host never sees channel
pushes; a push host gets its replies as pushes and the call returns at once. ``wait_for_sponsor_dm``
is the same wait on its own, for when the operator asks the agent to block.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, Field

from service.delivery.push import format_ts
from service.graph.errors import GraphError
from service.graph.models import ChatMember, ChatMessage
from service.ledger.memory.interactions import Action
from service.mcp.tool_registry import ToolCall, ToolError
from service.tools.action_log import record_action
from service.tools.chat_access import ChatAccess, ChatStanding
from service.tools.chat_out import PostText, composed_post
from service.tools.chat_send import Posted, PostOutcome, SendUnknown
from service.tools.deps import ToolDeps
from service.tools.graph_failures import graph_tool_error
from service.tools.ids import NamesAChat
from service.tools.mentions import Composed, member_for
from service.tools.sponsor_wait import SponsorReply, SponsorWaiter, WaitOutcome, WaitResult

log = logging.getLogger(__name__)

_TIMEOUT_DESCRIPTION = (
    "Seconds to wait for a sponsor's reply; the server caps it (ENTRABOT_SPONSOR_WAIT_TIMEOUT_S) and uses the "
    "cap when omitted."
)


_BACKLOG_DESCRIPTION = (
    "Sponsor messages written BEFORE the wait began (oldest first, each with its age and chat_id): older "
    "requests that may already be handled, not answers to what was just sent"
)
_MORE_BACKLOG_DESCRIPTION = (
    "More backlog than one result carries: wait_for_sponsor_dm hands over the rest"
)


class SendInput(NamesAChat, PostText):
    wait_for_reply: bool | None = Field(
        default=None,
        description="Wait for a sponsor's reply after posting. Omitted: wait only on hosts that cannot receive "
        "channel pushes. false: never wait. true: wait on any host.",
    )
    timeout_s: float | None = Field(default=None, gt=0, description=_TIMEOUT_DESCRIPTION)


class SendResult(BaseModel):
    # First, so that the first words of the result say whether the call waited and for how long: a
    # plain HTTP client's call that blocked for the default wait read as hung (issue 36).
    status: str = Field(
        description="What the call did, in one sentence: posted, and whether and how long it waited"
    )
    chat_id: str = Field(description="The chat the message was posted to")
    message_id: str
    posted_at: str
    posted_as: str = Field(
        description="agent_user, or signed_in_user (delegated mode, text prefixed [EntraBot])"
    )
    interaction_logged: bool
    post_outcome: PostOutcome = Field(
        description="posted; or, after Graph lost its answer, found_after_lost_answer "
        "(it had posted) or posted_after_check (it had not, and was posted once)"
    )
    wait: WaitOutcome
    wait_timeout_s: float | None = None
    sponsor_reply: SponsorReply | None = Field(
        default=None,
        description="The sponsor's reply, written after the send, from ANY watched chat: answer in "
        "its own chat_id",
    )
    backlog: list[SponsorReply] = Field(default_factory=list, description=_BACKLOG_DESCRIPTION)
    more_backlog: bool = Field(default=False, description=_MORE_BACKLOG_DESCRIPTION)
    next_action: str = Field(serialization_alias="_next_action")


class WaitInput(BaseModel):
    timeout_s: float | None = Field(default=None, gt=0, description=_TIMEOUT_DESCRIPTION)


class SponsorWaitResult(BaseModel):
    outcome: WaitOutcome
    timeout_s: float
    sponsor_reply: SponsorReply | None = Field(
        default=None, description="Written after the wait began: answer in its own chat_id"
    )
    backlog: list[SponsorReply] = Field(default_factory=list, description=_BACKLOG_DESCRIPTION)
    more_backlog: bool = Field(default=False, description=_MORE_BACKLOG_DESCRIPTION)
    next_action: str = Field(serialization_alias="_next_action")


_WAIT_ENDS = {
    WaitOutcome.REPLY: "a sponsor replied",
    WaitOutcome.BACKLOG: "older sponsor messages came, no reply yet",
    WaitOutcome.TIMEOUT: "no sponsor replied",
    WaitOutcome.CALLER_GONE: "the connection closed",
}


def wait_status(waited: WaitResult, elapsed_s: float, *, implicit: bool) -> str:
    """The result's first sentence: that the call waited after posting, how long, and how to skip it."""
    if waited.outcome is WaitOutcome.NO_SPONSORS:
        return "Posted; not waiting: no sponsor of the agent is known who could reply."
    if waited.outcome is WaitOutcome.SHUTTING_DOWN:
        return "Posted; not waiting: this server is shutting down."
    said = (
        f"Posted, then waited {elapsed_s:.1f} s (of up to {waited.timeout_s:g} s) for a sponsor's "
        f"reply: {_WAIT_ENDS.get(waited.outcome, waited.outcome.value)}."
    )
    if implicit:
        said += (
            " Hosts without channel pushes wait by default (ENTRABOT_SEND_REPLY_WAIT_S); "
            "wait_for_reply=false returns at once."
        )
    return said


def should_wait(wait_for_reply: bool | None, push_capable: bool) -> bool:
    return (not push_capable) if wait_for_reply is None else wait_for_reply


@dataclass
class ConversationTools:
    deps: ToolDeps
    access: ChatAccess
    waiter: SponsorWaiter

    async def send_teams_message(self, args: SendInput, call: ToolCall) -> SendResult:
        """Post a message to one Teams chat as the agent user. chat_id is required: there is no default chat.

        On hosts that cannot receive channel pushes it then waits for a sponsor's reply from ANY watched chat,
        not only this one: by default for up to ENTRABOT_SEND_REPLY_WAIT_S (45 s); wait_for_reply=false
        returns at once. If sponsor_reply is returned, reply in sponsor_reply.chat_id (which may differ from
        the chat you posted to), as _next_action says. Sponsor messages written before the send come in
        backlog, never as sponsor_reply: they are not answers to this message. No reply within the timeout
        is not an error.
        """
        deps = self.deps
        delegated = deps.options.auth_mode == "delegated"
        standing = await self.access.check(args.chat_id)
        composed = await self._compose(args)
        sent_once = await self._post(args.chat_id, composed, call)
        posted = sent_once.message
        logged = await self._record(
            call, args.chat_id, posted.id, composed.content, Action.SENT.value
        )
        log.info("chat message sent", extra={"chat_id": args.chat_id, "message_id": posted.id})
        if standing is ChatStanding.READABLE:
            await deps.loops.discovery.register_chat(
                args.chat_id
            )  # so replies in it are polled too
        sent = {
            "chat_id": args.chat_id,
            "message_id": posted.id,
            "posted_at": format_ts(posted.created_date_time),
            "posted_as": "signed_in_user" if delegated else "agent_user",
            "interaction_logged": logged,
            "post_outcome": sent_once.outcome,
        }
        if not should_wait(args.wait_for_reply, call.push_capable):
            after = (
                "Sent. Replies reach you as channel messages; do not poll for them."
                if call.push_capable
                else "Sent without waiting. Call wait_for_sponsor_dm only if the operator asks you to wait "
                "for a reply."
            )
            status = (
                "Posted; not waiting: replies reach this host as channel messages."
                if call.push_capable
                else "Posted; not waiting for a reply (wait_for_reply=false)."
            )
            return SendResult(status=status, **sent, wait=WaitOutcome.NOT_WAITED, next_action=after)
        return await self._wait_after_send(args, call, posted.id, sent)

    async def _wait_after_send(
        self, args: SendInput, call: ToolCall, message_id: str, sent: Mapping[str, str | bool]
    ) -> SendResult:
        """The sponsor wait after a post: its reply, or what to do without one."""
        # An implicit wait (wait_for_reply omitted) is short: a host that times out the call would
        # report a posted message as a failed send and invite a duplicate.
        default_s = self.deps.options.send_reply_wait_s if args.wait_for_reply is None else None
        began = time.monotonic()
        waited = await self.waiter.wait(call, args.timeout_s, default_s=default_s)
        status = wait_status(waited, time.monotonic() - began, implicit=default_s is not None)
        next_action = waited.next_action
        if waited.reply is None:
            posted_note = (
                f"Posted: message {message_id} is in chat {args.chat_id}; do not send it again. "
            )
            next_action = posted_note + (
                waited.next_action
                if waited.backlog
                else f"No sponsor reply yet ({waited.outcome.value} after {waited.timeout_s:g} s). "
                + waited.next_action
            )
        return SendResult(
            status=status,
            **sent,
            wait=waited.outcome,
            wait_timeout_s=waited.timeout_s,
            sponsor_reply=waited.reply,
            backlog=list(waited.backlog),
            more_backlog=waited.more_backlog,
            next_action=next_action,
        )

    async def wait_for_sponsor_dm(self, args: WaitInput, call: ToolCall) -> SponsorWaitResult:
        """Block until a sponsor of the agent writes in any watched chat, or until the timeout.

        Use only when the operator explicitly asks you to wait for a reply, or when a result said more backlog
        is waiting; never call it in a loop (a reply that arrives later is handed to your next
        send_teams_message or wait). The reply's chat_id is where to answer; messages written before the wait
        come in backlog, each with its age. No reply within the timeout is not an error.
        """
        waited: WaitResult = await self.waiter.wait(call, args.timeout_s)
        if waited.outcome in (WaitOutcome.NO_SPONSORS, WaitOutcome.SHUTTING_DOWN):
            raise ToolError(waited.next_action)
        return SponsorWaitResult(
            outcome=waited.outcome,
            timeout_s=waited.timeout_s,
            sponsor_reply=waited.reply,
            backlog=list(waited.backlog),
            more_backlog=waited.more_backlog,
            next_action=waited.next_action,
        )

    async def _compose(self, args: SendInput) -> Composed:
        """The body as posted: mentions placed (members of the chat only), the delegated prefix, the cap."""
        mentioned: list[ChatMember] = []
        if args.mentions:
            try:
                members = await self.deps.graph.chats.list_chat_members(args.chat_id)
            except GraphError as exc:
                raise graph_tool_error(
                    exc, f"listing the members of chat {args.chat_id} to mention them"
                ) from None
            for ref in args.mentions:
                member = member_for(ref, members)
                if member is None or not member.user_id:
                    raise ToolError(
                        f"{ref} is not a member of chat {args.chat_id}; only members can be mentioned "
                        "(list_chat_members shows them). Nothing was posted."
                    )
                mentioned.append(member)
        return composed_post(self.deps, args, mentioned)

    async def _post(self, chat_id: str, composed: Composed, call: ToolCall) -> Posted[ChatMessage]:
        """Post once; a post whose outcome stayed unknown is logged as such and never retried."""
        try:
            return await self.deps.outbox.chat.post(
                chat_id, composed.content, composed.content_type, composed.mentions
            )
        except SendUnknown:
            await self._record(call, chat_id, None, composed.content, Action.SEND_UNCONFIRMED.value)
            log.warning(
                "chat message send outcome unknown after settling", extra={"chat_id": chat_id}
            )
            raise ToolError(
                f"The message MAY have been posted to chat {chat_id}: Microsoft Graph failed after receiving "
                "it, twice, and reading the chat back could not tell. Do not resend blindly; check with "
                "read_teams_messages(chat_id) whether it is there first."
            ) from None
        except GraphError as exc:
            raise graph_tool_error(exc, f"posting to chat {chat_id}") from None

    async def _record(
        self, call: ToolCall, chat_id: str, message_id: str | None, content: str, action: str
    ) -> bool:
        return await record_action(
            self.deps, call, action=action, chat_id=chat_id, message_id=message_id, content=content
        )
