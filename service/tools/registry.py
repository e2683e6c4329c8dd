"""Every MCP tool of the agent, bound to one replica's dependencies and added to its tool registry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from service.delivery.inbox import Inbox
from service.mcp.sdk_adapter import PERMISSION_REQUEST_METHOD
from service.mcp.tool_registry import ToolHandler, ToolRegistry
from service.tools.cards import CardTools
from service.tools.catch_up import CatchUpTool
from service.tools.chat_access import ChatAccess
from service.tools.chat_membership import MembershipTools
from service.tools.channels import ChannelTools
from service.tools.chats import ChatTools
from service.tools.conversation import ConversationTools
from service.tools.deps import ToolDeps
from service.tools.files import FileTools
from service.tools.images import ImageTools
from service.tools.inbox import InboxTool
from service.tools.interactions import InteractionTools
from service.tools.mail import MailTools
from service.tools.mail_out import MailOutTools
from service.tools.own_messages import OwnMessageTools
from service.tools.placeholders import PlaceholderTools
from service.tools.permission_relay import PermissionRelay
from service.tools.promises import PromiseTools
from service.tools.reply_watch import ReplyWatches
from service.tools.sponsor_wait import SponsorWaiter
from service.tools.sponsor_wait_target import BacklogBounds
from service.tools.summary import SummaryTools
from service.tools.teams_reads import TeamsReadTools
from service.tools.whoami import WhoamiTool


def register_tools(registry: ToolRegistry, deps: ToolDeps, inbox: Inbox) -> None:
    """Add every tool to ``registry`` (before any host lists them); their state lives in these objects,
    and the inbox hosts' in ``inbox`` (the delivery half's)."""
    access = ChatAccess(deps.graph, deps.watched)
    bounds = BacklogBounds(
        deps.options.sponsor_wait_backlog_items, deps.options.sponsor_wait_backlog_chars
    )
    waiter = SponsorWaiter(deps.gate, deps.options.sponsor_wait_timeout_s, deps.clock, bounds)
    conversation = ConversationTools(deps, access, waiter)
    reads = TeamsReadTools(deps, access, ReplyWatches())
    chats = ChatTools(deps, access)
    promises = PromiseTools(deps)
    own = OwnMessageTools(deps, access)
    members = MembershipTools(deps, access)
    placeholders = PlaceholderTools(deps, access, own)
    handlers: tuple[ToolHandler[Any, Any], ...] = (
        conversation.send_teams_message,
        reads.read_teams_messages,
        chats.create_chat,
        chats.list_watched_chats,
        reads.watch_teams_replies,
        conversation.wait_for_sponsor_dm,
        MailTools(deps).read_email,
        promises.add_promise,
        promises.list_promises,
        promises.resolve_promise,
        InteractionTools(deps).read_interactions,
        SummaryTools(deps).run_daily_summary,
        own.edit_teams_message,
        own.delete_teams_message,
        members.list_chat_members,
        members.add_chat_member,
        WhoamiTool(deps).whoami,
        ImageTools(deps, access).view_image,
        CardTools(deps, access).send_adaptive_card,
        CatchUpTool(deps).catch_up,
        placeholders.post_placeholder,
        placeholders.update_placeholder,
        placeholders.resolve_placeholder,
        MailOutTools(deps).send_email,
        InboxTool(inbox).receive_messages,
        *_file_and_channel_tools(deps, access),
    )
    for handler in handlers:
        registry.add(handler)
    if deps.permissions is not None and deps.options.permission_relay_enabled:
        relay = PermissionRelay(
            deps, deps.permissions, timedelta(seconds=deps.options.permission_request_timeout_s)
        )
        registry.add_host_notification(PERMISSION_REQUEST_METHOD, relay.ask_sponsors)


def _file_and_channel_tools(
    deps: ToolDeps, access: ChatAccess
) -> tuple[ToolHandler[Any, Any], ...]:
    files, channels = FileTools(deps, access), ChannelTools(deps)
    return (
        files.resolve_file_url,
        files.list_recent_files,
        files.read_file,
        files.write_text_file,
        files.upload_file,
        files.share_file,
        files.add_file_comment,
        channels.list_channels,
        channels.read_channel,
        channels.read_thread,
        channels.post_in_channel,
        channels.reply_in_thread,
    )
