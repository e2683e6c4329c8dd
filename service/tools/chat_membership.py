"""Who is in a chat, and bringing someone in: list_chat_members and the sponsor-gated add_chat_member.

Adding a person to a chat lets them read it and, in a group chat, its history: only a sponsor may ask
for it, and only into a chat that sponsor is in (the single-host system's rule). The call cites the
sponsor's message that asked (``service.tools.sponsor_request``, which share_file uses too). A member added whose
answer was lost is settled by listing the chat's members, never by adding blindly again.

Graph's "Add member to a chat" (POST /chats/{id}/members, an aadUserConversationMember, delegated
ChatMember.ReadWrite) and "List members of a chat" pages were read, not run: only the emulator is here.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from service.delivery.push import meta_value
from service.graph.errors import GraphError, GraphUnavailable
from service.graph.models import ChatMember, User
from service.ledger.memory.interactions import Action
from service.mcp.tool_registry import ToolCall, ToolError
from service.tools.chat_access import ChatAccess
from service.tools.action_log import record_action
from service.tools.deps import ToolDeps
from service.tools.graph_failures import graph_tool_error
from service.tools.ids import ChatId, ChatMessageId, NamesAChat, UserRef
from service.tools.people import look_up_user, meta_or_none
from service.tools.sponsor_request import sponsor_who_asked


class ChatMemberRow(BaseModel):
    user_id: str | None = Field(
        description="The member's object id (None for a member Graph shows without one)"
    )
    display_name: str | None
    email: str | None
    roles: list[str]
    is_agent: bool = Field(description="The agent user itself")
    is_sponsor: bool = Field(
        description="A sponsor of the agent: their messages count as instructions"
    )
    external: bool = Field(description="From another tenant (a federated or guest account)")


class ChatMembersResult(BaseModel):
    chat_id: str
    members: list[ChatMemberRow]
    count: int


class AddMemberInput(NamesAChat):
    user: UserRef = Field(description="UPN (ada@contoso.com) or object id of the person to add")
    requested_in_chat_id: ChatId = Field(
        description="The chat of the sponsor's message that asked for this"
    )
    requested_by_message_id: ChatMessageId = Field(
        description="The id of the sponsor's message asking for this person to be added (within the last day)"
    )


class AddMemberResult(BaseModel):
    chat_id: str
    user_id: str
    display_name: str | None
    state: str = Field(description="added, or already_member")
    requested_by: str = Field(description="The sponsor whose message asked for it (object id)")
    interaction_logged: bool
    next_action: str = Field(serialization_alias="_next_action")


@dataclass
class MembershipTools:
    deps: ToolDeps
    access: ChatAccess

    async def list_chat_members(self, args: NamesAChat, call: ToolCall) -> ChatMembersResult:
        """The people in one Teams chat: who they are, which of them are the agent's sponsors, who is external."""
        deps = self.deps
        await self.access.check(args.chat_id)
        members = await self._members(args.chat_id)
        tenant = deps.options.tenant_id
        rows = [
            ChatMemberRow(
                user_id=m.user_id,
                display_name=meta_or_none(m.display_name),
                email=meta_or_none(m.email),
                roles=[meta_value(r) for r in m.roles],
                is_agent=m.user_id == deps.agent.object_id,
                is_sponsor=deps.gate.is_sponsor(m.user_id, args.chat_id),
                external=bool(tenant and m.tenant_id and m.tenant_id.lower() != tenant.lower()),
            )
            for m in members
        ]
        return ChatMembersResult(chat_id=args.chat_id, members=rows, count=len(rows))

    async def add_chat_member(self, args: AddMemberInput, call: ToolCall) -> AddMemberResult:
        """Add a person to a group chat, when a sponsor of the agent asked for it in a Teams message.

        Cite that message (requested_in_chat_id, requested_by_message_id). The sponsor must be a member of
        the chat the person is added to. Refused for anyone else's request, and for oneOnOne chats.
        """
        deps = self.deps
        await self.access.check(args.chat_id)
        sponsor = await sponsor_who_asked(
            deps,
            self.access,
            args.requested_in_chat_id,
            args.requested_by_message_id,
            asked_for="someone to be added",
        )
        members = await self._members(args.chat_id)
        if not any(m.user_id == sponsor for m in members):
            raise ToolError(
                f"The sponsor who asked is not a member of chat {args.chat_id}; a sponsor may only "
                "bring people into chats they are in. Nothing was changed."
            )
        person = await look_up_user(deps.graph, args.user)
        if any(m.user_id == person.id for m in members):
            return self._result(args, person, "already_member", sponsor, logged=False)
        await self._add(args.chat_id, person)
        logged = await record_action(
            deps,
            call,
            action=Action.MEMBER_ADDED.value,
            chat_id=args.chat_id,
            summary=f"added {person.id} at the request of sponsor {sponsor}",
        )
        return self._result(args, person, "added", sponsor, logged=logged)

    async def _members(self, chat_id: str) -> list[ChatMember]:
        try:
            return await self.deps.graph.chats.list_chat_members(chat_id)
        except GraphError as exc:
            raise graph_tool_error(exc, f"listing the members of chat {chat_id}") from None

    async def _add(self, chat_id: str, person: User) -> None:
        try:
            chat = await self.deps.graph.chats.get_chat(chat_id)
            if chat.chat_type != "group":
                raise ToolError(
                    f"Chat {chat_id} is a {chat.chat_type} chat; people can be added only to group "
                    "chats. Create a group chat with create_chat instead."
                )
            await self.deps.graph.chats.add_chat_member(chat_id, person.id)
        except GraphUnavailable as exc:
            if not exc.outcome_unknown:
                raise graph_tool_error(exc, f"adding a member to chat {chat_id}") from None
            # The add may have happened: the members say whether it did.
            if not any(m.user_id == person.id for m in await self._members(chat_id)):
                raise ToolError(
                    f"{person.id} was not added to chat {chat_id}: Microsoft Graph failed, and the "
                    "members listed afterwards do not include them. Try again."
                ) from None
        except GraphError as exc:
            raise graph_tool_error(exc, f"adding a member to chat {chat_id}") from None

    def _result(
        self, args: AddMemberInput, person: User, state: str, sponsor: str, *, logged: bool
    ) -> AddMemberResult:
        return AddMemberResult(
            chat_id=args.chat_id,
            user_id=person.id,
            display_name=meta_or_none(person.display_name),
            state=state,
            requested_by=sponsor,
            interaction_logged=logged,
            next_action="Tell the chat who joined and why, with send_teams_message."
            if state == "added"
            else "They are already in the chat; nothing was changed.",
        )
