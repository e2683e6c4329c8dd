"""The emulator's Teams routes as Microsoft's Graph SDK for Python (msgraph-sdk) sees them: every team,
channel and channel-message route, read through the SDK's request builders and models, a root and a
reply posted through them, and a delta round followed through its deltaLink with the SDK's with_url."""

from __future__ import annotations

from kiota_abstractions.base_request_configuration import RequestConfiguration
from msgraph.generated.models.body_type import BodyType
from msgraph.generated.models.chat_message import ChatMessage
from msgraph.generated.models.item_body import ItemBody
from msgraph.generated.teams.item.channels.item.messages.delta.delta_request_builder import (
    DeltaRequestBuilder,
)

from emulator import RunningEmulator
from tests.emulator.emulator_testkit import Entra
from tests.emulator.test_emulator_channels import TEAM, emu  # noqa: F401  (fixture)
from tests.emulator.test_emulator_through_graph_sdk import _sdk


async def test_the_sdk_reads_teams_channels_messages_and_replies(
    emu: RunningEmulator, entra: Entra
) -> None:
    client = _sdk(emu, entra.agent_token())
    joined = await client.me.joined_teams.get()
    assert joined is not None and [t.display_name for t in joined.value or []] == ["Engineering"]
    team = await client.teams.by_team_id(TEAM).get()
    assert team is not None and team.display_name == "Engineering"
    channels = await client.teams.by_team_id(TEAM).channels.get()
    assert channels is not None
    ops = next(c for c in channels.value or [] if c.display_name == "Ops")
    assert ops.id is not None and ops.membership_type is not None
    every = await client.teams.by_team_id(TEAM).all_channels.get()
    assert every is not None and len(every.value or []) == 2
    channel = client.teams.by_team_id(TEAM).channels.by_channel_id(ops.id)
    one = await channel.get()
    assert one is not None and one.display_name == "Ops"
    messages = await channel.messages.get()
    assert messages is not None and messages.value
    root = messages.value[0]
    assert root.id is not None and root.channel_identity is not None
    assert root.channel_identity.team_id == TEAM
    got = await channel.messages.by_chat_message_id(root.id).get()
    assert got is not None and got.body is not None and got.body.content == "deploy at noon?"
    replies = await channel.messages.by_chat_message_id(root.id).replies.get()
    assert replies is not None and replies.value
    reply = replies.value[0]
    assert reply.id is not None and reply.reply_to_id == root.id
    again = (
        await channel.messages.by_chat_message_id(root.id)
        .replies.by_chat_message_id1(reply.id)
        .get()
    )
    assert again is not None and again.body is not None and again.body.content == "yes"


async def test_the_sdk_posts_a_root_and_a_reply_and_follows_a_delta_round(
    emu: RunningEmulator, entra: Entra
) -> None:
    client = _sdk(emu, entra.agent_token())
    channels = await client.teams.by_team_id(TEAM).channels.get()
    assert channels is not None
    ops = next(c.id for c in channels.value or [] if c.display_name == "Ops")
    assert ops is not None
    channel = client.teams.by_team_id(TEAM).channels.by_channel_id(ops)
    first = await channel.messages.delta.get(
        RequestConfiguration(
            query_parameters=DeltaRequestBuilder.DeltaRequestBuilderGetQueryParameters(
                expand=["replies"], top=50
            )
        )
    )
    assert first is not None and first.odata_delta_link is not None
    assert [m.body.content for m in first.value or [] if m.body] == ["deploy at noon?"]
    root = await channel.messages.post(
        ChatMessage(body=ItemBody(content_type=BodyType.Text, content="from the SDK"))
    )
    assert root is not None and root.id is not None
    reply = await channel.messages.by_chat_message_id(root.id).replies.post(
        ChatMessage(body=ItemBody(content_type=BodyType.Text, content="a reply from the SDK"))
    )
    assert reply is not None and reply.reply_to_id == root.id
    later = await channel.messages.delta.with_url(first.odata_delta_link).get()
    assert later is not None
    [changed] = later.value or []
    assert changed.id == root.id
    assert [r.body.content for r in changed.replies or [] if r.body] == ["a reply from the SDK"]
