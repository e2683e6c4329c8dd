"""The Graph client's Teams channel methods (``graph.channels``) over real HTTP against the emulator:
discovery of teams and of a channel added later, the delta read that flattens roots and replies
changed after a moment, reads of roots and replies, and posts as the agent user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from emulator.seed import Seed, build_seed
from service.graph.models import OutboundMention
from tests.graph.test_against_emulator import Tenant, running_tenant

TEAM = "7d1c0b8e-0000-4000-8000-00000000e002"


def _seed() -> Seed:
    base = build_seed(chats=1, humans=3)
    ada, grace, _ = base.humans
    data = base.model_dump()
    data["teams"] = [
        {
            "id": TEAM,
            "display_name": "Engineering",
            "members": [ada.id, grace.id, base.agent_user.id],
            "channels": [
                {
                    "display_name": "Ops",
                    "messages": [
                        {
                            "from_user": ada.id,
                            "content": "old thread",
                            "created": "-2d",
                            "replies": [
                                {"from_user": grace.id, "content": "old reply", "created": "-2d"}
                            ],
                        }
                    ],
                }
            ],
        }
    ]
    return Seed.model_validate(data)


@pytest.fixture
async def tenant() -> AsyncIterator[Tenant]:
    async with running_tenant(_seed()) as t:
        yield t


async def _ops(tenant: Tenant) -> str:
    channels = await tenant.client().channels.list_channels(TEAM)
    return next(c.id for c in channels if c.display_name == "Ops")


async def test_joined_teams_and_a_channel_added_later_are_discovered(tenant: Tenant) -> None:
    client = tenant.client()
    assert [(t.id, t.display_name) for t in await client.channels.joined_teams()] == [
        (TEAM, "Engineering")
    ]
    before = [c.display_name for c in await client.channels.list_channels(TEAM)]
    await tenant.admin("POST", f"teams/{TEAM}/channels", {"display_name": "Launch"})
    after = await client.channels.list_channels(TEAM)
    assert before == ["General", "Ops"]
    assert [(c.display_name, c.membership_type) for c in after][-1] == ("Launch", "standard")


async def test_changed_since_returns_new_roots_and_new_replies_to_old_roots(tenant: Tenant) -> None:
    client = tenant.client()
    ops = await _ops(tenant)
    [old] = await client.channels.list_messages(TEAM, ops)
    since = old.modified_or_created + timedelta(milliseconds=1)
    ada = tenant.seed.humans[0].id
    await tenant.admin(
        "POST",
        f"teams/{TEAM}/channels/{ops}/messages/{old.id}/replies",
        {"from_user": ada, "content": "new reply"},
    )
    new_root = await tenant.admin(
        "POST", f"teams/{TEAM}/channels/{ops}/messages", {"from_user": ada, "content": "new thread"}
    )

    changed = [
        m async for page in client.channels.changed_since(TEAM, ops, since) for m in page.items
    ]

    by_text = {m.body.content: m for m in changed}
    assert set(by_text) == {"old thread", "new reply", "new thread"}  # the old root was touched
    assert by_text["new reply"].reply_to_id == old.id
    assert by_text["new thread"].id == new_root["id"] and by_text["new thread"].reply_to_id is None
    assert all(
        m.channel_identity is not None and m.channel_identity.channel_id == ops for m in changed
    )


async def test_posts_and_replies_as_the_agent_user_are_read_back(tenant: Tenant) -> None:
    client = tenant.client()
    ops = await _ops(tenant)
    ada = tenant.seed.humans[0]
    root = await client.channels.post_message(TEAM, ops, "<p>status</p>")
    reply = await client.channels.post_reply(
        TEAM, ops, root.id, '<at id="0">Ada</at> done', [OutboundMention(0, "Ada", ada.id)]
    )
    assert root.sender is not None and root.sender.id == tenant.seed.agent_user.id
    assert reply.reply_to_id == root.id
    assert [m.user.id for m in reply.mentions if m.user] == [ada.id]
    assert (await client.channels.get_message(TEAM, ops, root.id)).body.content == "<p>status</p>"
    replies = await client.channels.list_replies(TEAM, ops, root.id, top=10)
    assert [r.id for r in replies] == [reply.id]
