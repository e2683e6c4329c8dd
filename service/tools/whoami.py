"""Who the agent is here: the agent user, its agent identity, its sponsors, and the replica answering.

Names come from the directory (people choose them), so they are made safe to show outside an envelope.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from service.mcp.tool_registry import ToolCall
from service.tools.chats import NoArguments
from service.tools.people import meta_or_none as _shown
from service.tools.deps import ToolDeps


class SponsorInfo(BaseModel):
    user_id: str
    user_principal_name: str | None
    display_name: str | None


class WhoamiResult(BaseModel):
    agent_user_id: str
    agent_user_principal_name: str | None
    agent_display_name: str | None
    agent_identity_id: str | None = Field(
        description="The Entra agent identity the agent user belongs to"
    )
    auth_mode: str = Field(
        description="agent_user (posts as the agent user) or delegated (as a signed-in person)"
    )
    sponsors: list[SponsorInfo] = Field(
        description="The people whose messages count as instructions"
    )
    sponsors_known: bool = Field(
        description="False when the sponsor list could not be read lately: none counts"
    )
    replica_id: str = Field(
        description="The fleet replica answering this call (any replica may answer)"
    )


@dataclass
class WhoamiTool:
    deps: ToolDeps

    async def whoami(self, args: NoArguments, call: ToolCall) -> WhoamiResult:
        """Which agent user this fleet serves, its agent identity and its sponsors (whose messages you act on)."""
        deps = self.deps
        sponsors = deps.gate.sponsors
        return WhoamiResult(
            agent_user_id=deps.agent.object_id,
            agent_user_principal_name=_shown(deps.agent.upn),
            agent_display_name=_shown(deps.agent.display_name),
            agent_identity_id=deps.options.agent_identity_id,
            auth_mode=deps.options.auth_mode,
            sponsors=[
                SponsorInfo(
                    user_id=s.object_id,
                    user_principal_name=_shown(s.user_principal_name),
                    display_name=_shown(s.display_name),
                )
                for s in sponsors
            ],
            sponsors_known=bool(sponsors) or deps.gate.holds_read_list(),
            replica_id=deps.replica_id,
        )
