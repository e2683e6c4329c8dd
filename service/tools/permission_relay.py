"""Permission relay: a host's tool-use approval asked of the agent's sponsor in Teams, answered there.

The channel bridge (``entrabot-fleet channel``) forwards Claude Code's
``notifications/claude/channel/permission_request`` to the fleet as that same notification on its own
session. It is a host notification, not a tool: nothing lists it, so no model can call it and forge a
prompt that the sponsor could not tell from Claude Code's own. The fleet
records the request in the shared container (so every other replica leaves the sponsor's verdict
alone), DMs each sponsor — the tool, the description and the request id, the input preview inside
the XPIA envelope — and registers a ``PermissionTarget`` in the hub. A verified sponsor's
"yes <id>" / "no <id>" in any watched chat is then claimed exactly once, like any message, and handed
to that target, which pushes ``notifications/claude/channel/permission`` to the bridge that asked;
it is never also delivered as an ordinary push. Anyone else's reply, a wrong id, or a reply after the
request expired decides nothing (it is an ordinary message then).

A verdict reaches only the session that asked. While that session's stream is down it waits in
Graph, unclaimed, and a stream resumed before the expiry gets it. If the session is gone (its
replica died, or the bridge re-initialized elsewhere), the shared record still names this replica
until the expiry, so every replica leaves the reply alone until then; after it, the reply is an
ordinary message and is pushed as one. Nothing re-asks: the bridge does not repeat the request on
its new session, and the same id is refused while the first request is live. Claude Code's own
prompt still takes a local answer meanwhile.

Declaring ``claude/channel/permission`` lets a remote person approve the agent's tool use, so it is
offered only over an authenticated fleet connection: ``/mcp`` requires bearer auth off loopback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio
from pydantic import BaseModel, Field

from service.delivery.hub import Handover, TargetKind
from service.domain.message import InboundMessage, Source
from service.delivery.permission_verdict import REQUEST_ID_PATTERN, parse_verdict, verdict_push
from service.delivery.push import format_ts
from service.delivery.xpia import neutralise, wrap_for_channel
from service.graph.errors import GraphError
from service.clock import Clock
from service.ledger.memory.permission_requests import PermissionRequests, ReserveOutcome
from service.mcp.tool_registry import SessionChannel, ToolCall, ToolError
from service.ledger.memory.interactions import Action
from service.tools.action_log import record_action
from service.tools.deps import ToolDeps

log = logging.getLogger(__name__)

MAX_SPONSORS_ASKED = 3
MAX_PREVIEW_CHARS = 1000  # Claude Code sends at most 200; a longer one is cut, never refused
SEND_TIMEOUT_S = 10.0


class PermissionRequestInput(BaseModel):
    request_id: str = Field(
        pattern=REQUEST_ID_PATTERN, description="The host's five-letter request id"
    )
    tool_name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    input_preview: str = Field(
        default="", description="Shown to the sponsor inside an external_content envelope"
    )


@dataclass(eq=False)
class PermissionTarget:
    """One pending request, as a delivery target: takes exactly one verified sponsor's verdict for it.

    It dies at ``expires_at`` by the replica's clock, not when a timer gets to it: a timer firing while
    the host's stream is down, or started only after the sponsors were asked, would leave a target
    that a resumed stream revives past the fleet's record of the request, relaying a late "yes".
    """

    request_id: str
    send: Callable[[BaseModel], Awaitable[None]]
    stream_open: Callable[[], bool]
    on_decided: Callable[[str], Awaitable[None]]
    expires_at: datetime
    clock: Clock
    send_timeout_s: float = SEND_TIMEOUT_S
    on_relayed: Callable[[InboundMessage], Awaitable[None]] | None = (
        None  # the audit trail's record
    )
    _done: bool = False

    @property
    def target_id(self) -> str:
        return f"permission:{self.request_id}"

    @property
    def kind(self) -> TargetKind:
        return TargetKind.PERMISSION

    def is_alive(self) -> bool:
        return not self._done and self.clock() < self.expires_at and self.stream_open()

    @property
    def ended(self) -> bool:
        return self._done

    def end(self) -> None:
        self._done = True

    def accepts(self, message: InboundMessage) -> bool:
        # A sponsor's own account only: an account matched by address may talk, never approve a tool use.
        if message.source is not Source.CHAT or not message.sender_is_directory_sponsor:
            return False
        verdict = parse_verdict(message.body)
        return verdict is not None and verdict.request_id == self.request_id

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        return (
            not alongside
        )  # one verdict decides the request: a second one claimed would reach nobody

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        """Nothing to prepare: the verdict is relayed as it is handed over."""

    async def deliver(self, message: InboundMessage) -> Handover:
        verdict = parse_verdict(message.body)
        if not self.is_alive() or verdict is None or verdict.request_id != self.request_id:
            return Handover.NOT_TAKEN
        with anyio.move_on_after(self.send_timeout_s) as scope:
            await self.send(verdict_push(verdict))
        if scope.cancelled_caught:
            # The session may have taken the verdict as the timeout fired (push_target.py says why):
            # it must not reach the agent again as an ordinary message.
            return Handover.IN_DOUBT
        self._done = True
        log.info(
            "permission verdict relayed",
            extra={
                "request_id": self.request_id,
                "behavior": verdict.behavior,
                "chat_id": message.chat_id,
                "message_id": message.message_id,
            },
        )
        await self.on_decided(self.request_id)
        if self.on_relayed is not None:
            await self.on_relayed(message)
        return Handover.TAKEN


def sponsor_prompt(args: PermissionRequestInput) -> str:
    """The DM text. Tool name and description come from the host's model, so they are defanged; the
    input preview may quote anything the agent read, so it goes inside the envelope."""
    preview = wrap_for_channel(
        args.input_preview[:MAX_PREVIEW_CHARS],
        source=Source.CHAT,
        sender="permission request input",
    )
    return (
        f"Permission request {args.request_id}: the agent wants to run {neutralise(args.tool_name)}.\n"
        f"{neutralise(args.description)}\n"
        f"Input preview (data, not instructions):\n{preview}\n"
        f'Reply "yes {args.request_id}" to allow or "no {args.request_id}" to deny.'
    )


@dataclass
class PermissionRelay:
    deps: ToolDeps
    requests: PermissionRequests
    ttl: timedelta

    async def ask_sponsors(self, args: PermissionRequestInput, call: ToolCall) -> None:
        """Ask the agent's sponsor in Teams to approve a tool use; the verdict goes to the asking session
        as notifications/claude/channel/permission. A ToolError says why nobody was asked (logged)."""
        deps = self.deps
        channel = call.channel
        if channel is None or not call.push_capable or not channel.is_open():
            raise ToolError(
                "a permission request needs a push host with an open stream (entrabot-fleet channel): "
                "the verdict is pushed, never returned"
            )
        if call.hub.closed:
            raise ToolError("this replica is shutting down; the bridge reconnects, then ask again")
        sponsors = sorted(deps.gate.sponsor_ids)[:MAX_SPONSORS_ASKED]
        if not sponsors:
            raise ToolError(
                "no sponsor of the agent identity is known, so nobody can approve; answer locally"
            )
        expires_at = await self._reserve(args.request_id)
        target = self._target(args, call, channel, expires_at)
        call.hub.register(target)
        asked = await self._ask(sponsors, sponsor_prompt(args))
        if not asked:
            call.hub.unregister(target.target_id)
            await self._decided(args.request_id)
            raise ToolError("no sponsor could be reached in Teams; answer the request locally")
        await record_action(
            deps,
            call,
            action=Action.PERMISSION_ASKED.value,
            chat_id=None,
            summary=f"{args.request_id}: {neutralise(args.tool_name)}, {asked} sponsor(s) asked",
        )
        # Owned by the replica's background work (through the hub): cancelled at shutdown, when the
        # request's record lets any replica expire it instead.
        self.deps.hub.background.spawn(
            self._expire(target), name=f"permission-expiry-{args.request_id}"
        )
        log.info(
            "permission requested",
            extra={
                "request_id": args.request_id,
                "sponsors_asked": asked,
                "expires_at": format_ts(expires_at),
            },
        )

    async def _reserve(self, request_id: str) -> datetime:
        """Record the request for the fleet; when this replica's target for it expires."""
        # Taken before the record's own (later) clock reading: this replica's target dies no later
        # than the fleet's record, so no reply counts here that other replicas take for ordinary.
        expires_at = self.deps.clock() + self.ttl
        reserved = await self.requests.reserve(request_id, self.ttl)
        if reserved is ReserveOutcome.TAKEN:
            raise ToolError(f"a permission request {request_id} is already pending")
        if reserved is ReserveOutcome.UNRESOLVED:
            raise ToolError(
                "the shared store could not record the request; nobody was asked, try again"
            )
        return expires_at

    def _target(
        self,
        args: PermissionRequestInput,
        call: ToolCall,
        channel: SessionChannel,
        expires_at: datetime,
    ) -> PermissionTarget:
        """Where a sponsor's verdict goes: the asking session's channel, logged once relayed."""
        deps = self.deps

        async def relayed(message: InboundMessage) -> None:
            verdict = parse_verdict(message.body)
            await record_action(
                deps,
                call,
                action=Action.VERDICT_RELAYED.value,
                chat_id=message.chat_id,
                message_id=message.message_id,
                summary=f"{verdict.behavior if verdict else 'verdict'} {args.request_id} from "
                f"sponsor {message.sender_id}",
            )

        return PermissionTarget(
            args.request_id,
            channel.send,
            channel.is_open,
            self._decided,
            expires_at,
            deps.clock,
            on_relayed=relayed,
        )

    async def _ask(self, sponsors: list[str], text: str) -> int:
        asked = 0
        deps = self.deps
        for sponsor_id in sponsors:
            try:
                chat = await deps.graph.chats.create_chat(
                    "oneOnOne", [deps.agent.object_id, sponsor_id]
                )
                await deps.loops.discovery.register_chat(
                    chat.id
                )  # watched before asking, so the reply is polled
                await deps.graph.messages.send_chat_message(chat.id, text)
            except GraphError as exc:
                log.warning(
                    "could not ask a sponsor",
                    extra={
                        "sponsor_id": sponsor_id,
                        "error": type(exc).__name__,
                        "status": exc.status,
                    },
                )
                continue
            asked += 1
        return asked

    async def _expire(self, target: PermissionTarget) -> None:
        await asyncio.sleep(max(0.0, (target.expires_at - self.deps.clock()).total_seconds()))
        # Ended whether or not the host's stream is open now: a stream resumed later must not revive it.
        if not target.ended:
            target.end()
            await self._decided(target.request_id)
            log.info("permission request expired", extra={"request_id": target.request_id})

    async def _decided(self, request_id: str) -> None:
        self.deps.hub.unregister(f"permission:{request_id}")
        # Best effort: a record left live here only expires later; other replicas meanwhile leave
        # that id's verdicts alone, which delays an ordinary message but loses nothing.
        await self.requests.end(request_id)
