"""Which chats the agent has: create one, and list the watched ones (the only sources of a chat_id)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from service.graph.errors import GraphError, GraphUnavailable
from service.graph.models import User
from service.ledger.memory.watched_chats import WatchOutcome
from service.ledger.records.reads import ReadOutcome
from service.mcp.tool_registry import ToolCall, ToolError
from service.tools.chat_access import ChatAccess
from service.tools.deps import ToolDeps
from service.tools.graph_failures import graph_tool_error
from service.tools.ids import UserRef
from service.tools.people import look_up_user, meta_or_none

MAX_MEMBERS = 20
MAX_TOPIC_CHARS = 250


class CreateChatInput(BaseModel):
    members: list[UserRef] = Field(
        min_length=1,
        max_length=MAX_MEMBERS,
        description="UPNs (ada@contoso.com) or object ids of the people to chat with; the agent user is added itself",
    )
    topic: str | None = Field(
        default=None, max_length=MAX_TOPIC_CHARS, description="Group chats only"
    )
    chat_type: Literal["oneOnOne", "group"] | None = Field(
        default=None, description="Omitted: oneOnOne for one person, group for several"
    )

    @model_validator(mode="after")
    def _fits_type(self) -> CreateChatInput:
        people = len(set(self.members))
        if self.chat_type == "oneOnOne" and (people != 1 or self.topic):
            raise ValueError(
                "a oneOnOne chat is with exactly one other person and has no topic; use chat_type group"
            )
        if self.chat_type == "group" and people < 2:
            raise ValueError(
                "a group chat needs at least two other people; for one person use chat_type oneOnOne"
            )
        return self


class NoArguments(BaseModel):
    pass


class ChatMemberInfo(BaseModel):
    user_id: str
    user_principal_name: str | None
    display_name: str | None


class CreateChatResult(BaseModel):
    chat_id: str
    chat_type: str
    topic: str | None
    members: list[ChatMemberInfo]
    watched: bool = Field(
        description="Saved to the shared watched list (else saved on the next discovery sweep)"
    )
    next_action: str = Field(serialization_alias="_next_action")


class WatchedChat(BaseModel):
    chat_id: str
    topic: str | None = Field(description="Known only for chats this replica created or looked up")


class WatchedChatsResult(BaseModel):
    chats: list[WatchedChat]
    count: int
    list_readable: bool = Field(
        description="False when the shared list could not be read; only chats known here"
    )
    unsaved: int = Field(
        description="Chats not yet written to the shared list (retried every discovery sweep)"
    )


@dataclass
class ChatTools:
    deps: ToolDeps
    access: ChatAccess

    async def create_chat(self, args: CreateChatInput, call: ToolCall) -> CreateChatResult:
        """Create a Teams chat between the agent user and the given people, and start watching it.

        A oneOnOne chat with someone the agent already has one with returns that chat. Returns the chat_id to use
        with send_teams_message; the chat's newest message reaches you even if it is old.
        """
        deps = self.deps
        people = [u for u in await self._resolve(args.members) if u.id != deps.agent.object_id]
        if not people:
            raise ToolError(
                "members names only the agent user itself; name the people to chat with"
            )
        chat_type = args.chat_type or ("oneOnOne" if len(people) == 1 else "group")
        try:
            chat = await deps.graph.chats.create_chat(
                chat_type, [deps.agent.object_id, *(u.id for u in people)], args.topic
            )
        except ValueError as exc:
            raise ToolError(f"{exc}") from None
        except GraphUnavailable as exc:
            if exc.outcome_unknown:
                raise ToolError(
                    "The chat MAY have been created: Microsoft Graph failed after receiving the request. Do not "
                    "create it again blindly; call list_watched_chats after the next discovery sweep (about two "
                    "minutes) to see whether it exists."
                ) from None
            raise graph_tool_error(exc, "creating a chat") from None
        except GraphError as exc:
            raise graph_tool_error(exc, "creating a chat") from None
        self.access.remember(chat)
        # Flag before watching: a poll right after the watch must already surface its newest message.
        await deps.loops.chat_poller.register_created_chat(chat.id)
        outcome = await deps.loops.discovery.register_chat(chat.id)
        return CreateChatResult(
            chat_id=chat.id,
            chat_type=chat.chat_type,
            topic=meta_or_none(chat.topic),
            members=[
                ChatMemberInfo(
                    user_id=u.id,
                    user_principal_name=meta_or_none(u.user_principal_name),
                    display_name=meta_or_none(u.display_name),
                )
                for u in people
            ],
            watched=outcome is not WatchOutcome.FAILED,
            next_action=f"Post in it with send_teams_message(chat_id={chat.id!r}).",
        )

    async def list_watched_chats(self, args: NoArguments, call: ToolCall) -> WatchedChatsResult:
        """The Teams chats the agent watches: every chat_id you may use (there is no default chat)."""
        watched = self.deps.watched
        readable = True
        if watched.needs_load:
            readable = await watched.load() is not ReadOutcome.UNRESOLVED
        chats = [WatchedChat(chat_id=c, topic=self._topic(c)) for c in sorted(watched.chats)]
        return WatchedChatsResult(
            chats=chats, count=len(chats), list_readable=readable, unsaved=len(watched.dirty)
        )

    def _topic(self, chat_id: str) -> str | None:
        return meta_or_none(self.access.topic(chat_id))

    async def _resolve(self, refs: list[str]) -> list[User]:
        users: dict[str, User] = {}
        for ref in dict.fromkeys(refs):
            user = await look_up_user(self.deps.graph, ref)
            users.setdefault(user.id, user)
        return list(users.values())
