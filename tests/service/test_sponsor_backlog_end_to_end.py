"""Issue 23 item 10: a non-push host's sponsor wait hands the backlog over in one result, bounded, and
tells it apart from a reply. A replica process (real uvicorn), Azurite, the Graph emulator over HTTP and
the official MCP Python client as a host that takes no pushes.

History is present in every chat (three days old: the fleet's first sight surfaces none of it). Then,
while no host is connected, the sponsor writes in all three chats over an hour, two hours before the
send, and another person writes between. The send's wait gets the oldest of that backlog, up to the
replica's bound, in one result; the next wait gets the rest; a reply written during a third wait comes
as the reply. The ledger claims exactly what the results carried, once each, and nothing else.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from eventually import SLOW_POLL_S, SLOW_WAIT_S, eventually
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from emulator.server import RunningEmulator
from service.devstack.azurite import Azurite
from service.devstack.fleet import DEV_TOKEN, LocalFleet
from service.devstack.traffic import HumanTraffic
from service.domain.conversation import TEAMS_CHATS
from service.ledger.fleet.hints import HintReader
from service.ledger.memory.interactions import Direction, InteractionLog, InteractionQuery
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics
from tests.service.test_hosts_end_to_end import sponsor_waits
from tests.service.test_sponsor_wait_takes_one_end_to_end import (  # noqa: F401 - emulator: the fixture
    bootstrap_every_chat,
    chat_of,
    emulator,
    one_replica,
)

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

BOUND_S = 30.0
BACKLOG_ITEMS = (
    4  # the replica's bound, below the six backlog messages: two are left for the next wait
)
NON_PUSH_HOST = Implementation(name="copilot-cli", version="1.0")


@pytest.fixture
def fleet(azurite: Azurite, emulator: RunningEmulator, tmp_path: Path) -> Iterator[LocalFleet]:
    with one_replica(
        azurite, emulator, tmp_path, ENTRABOT_SPONSOR_WAIT_BACKLOG_ITEMS=str(BACKLOG_ITEMS)
    ) as running:
        yield running


@pytest.fixture
async def store(fleet: LocalFleet) -> Any:
    assert fleet.azurite is not None
    backend = BlobBackend.from_connection_string(
        fleet.azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    yield backend
    await backend.aclose()


async def write(
    http: httpx.AsyncClient, emulator: RunningEmulator, chat: str, who: str, text: str, at: datetime
) -> str:
    """A message written at ``at`` (the emulator's admin API stamps it so)."""
    response = await http.post(
        f"{emulator.admin_url}/chats/{chat}/messages",
        json={"from_user": who, "content": text, "created": at.isoformat()},
    )
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


async def call(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    # The HTTP read timeout outlasts the wait: the result comes on the call's own SSE stream.
    timeout = httpx2.Timeout(30.0, read=BOUND_S + 20)
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {DEV_TOKEN}"}, timeout=timeout
        ) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="legacy",
            client_info=NON_PUSH_HOST,
            read_timeout_seconds=BOUND_S + 20,
        ) as client,
    ):
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_the_backlog_comes_in_bounded_results_apart_from_the_reply_and_is_claimed_once(
    fleet: LocalFleet, emulator: RunningEmulator, store: BlobBackend
) -> None:
    replica = fleet.members[0]
    ada, grace, alan = emulator.seed.humans[:3]
    chats = [chat_of(emulator, i) for i in range(3)]
    now = datetime.now(timezone.utc)
    async with httpx.AsyncClient(timeout=30) as http:
        history = [
            await write(
                http,
                emulator,
                chat,
                who.id,
                f"old news {i}",
                now - timedelta(days=3, minutes=10 - i),
            )
            for i, (chat, who) in enumerate(
                [
                    (chats[0], ada),
                    (chats[1], grace),
                    (chats[1], ada),
                    (chats[2], alan),
                    (chats[2], ada),
                ]
            )
        ]
        await bootstrap_every_chat(
            fleet, emulator
        )  # first sights: the history is too old to surface

        # The backlog: Ada in every chat, two hours to one hour before the send; Grace in between.
        reader = HintReader(store)
        await reader.poll()  # only the hints from here on
        plan = [
            (chats[1], ada),
            (chats[0], ada),
            (chats[1], grace),
            (chats[2], ada),
            (chats[1], ada),
            (chats[0], ada),
            (chats[2], ada),
        ]
        written = {
            await write(
                http, emulator, chat, who.id, f"backlog {n}", now - timedelta(minutes=120 - 10 * n)
            ): (chat, who, f"backlog {n}")
            for n, (chat, who) in enumerate(plan)
        }
    backlog = [mid for mid, (_, who, _) in written.items() if who is ada]  # oldest first
    grace_id = next(mid for mid, (_, who, _) in written.items() if who is grace)
    hinted: set[str] = set()

    async def every_chat_hinted() -> bool:
        hinted.update(h.chat_id for h in await reader.poll() or [])
        return hinted >= set(chats)

    await eventually(
        every_chat_hinted,
        "the scan's hints for the three chats",
        timeout_s=SLOW_WAIT_S,
        poll_s=SLOW_POLL_S,
    )

    sent = await call(
        replica.mcp_url,
        "send_teams_message",
        {
            "chat_id": chats[0],
            "text": "Deploying now.",
            "wait_for_reply": True,
            "timeout_s": BOUND_S,
        },
    )
    assert sent["wait"] == "backlog" and sent["sponsor_reply"] is None
    first = sent["backlog"]
    assert [b["message_id"] for b in first] == backlog[
        :BACKLOG_ITEMS
    ]  # the oldest, from all three chats
    for item in first:
        chat, _, text = written[item["message_id"]]
        assert (item["chat_id"], item["content"]) == (chat, text)  # a verified sponsor's text, bare
        assert (
            item["predates_wait"] is True
            and item["age_s"] >= 3000
            and item["verified_sponsor"] is True
        )
    assert {b["chat_id"] for b in first} == set(chats)
    assert sent["more_backlog"] is True
    assert sent["_next_action"].startswith(
        f"Posted: message {sent['message_id']} is in chat {chats[0]}"
    )
    assert "backlog" in sent["_next_action"] and "wait_for_sponsor_dm" in sent["_next_action"]

    rest = await call(replica.mcp_url, "wait_for_sponsor_dm", {"timeout_s": BOUND_S})
    assert rest["outcome"] == "backlog" and rest["sponsor_reply"] is None
    assert [b["message_id"] for b in rest["backlog"]] == backlog[BACKLOG_ITEMS:]
    assert rest["more_backlog"] is False

    waiting = asyncio.create_task(
        call(replica.mcp_url, "wait_for_sponsor_dm", {"timeout_s": BOUND_S})
    )
    await eventually(
        lambda: sponsor_waits(replica), "the third wait", timeout_s=SLOW_WAIT_S, poll_s=SLOW_POLL_S
    )
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await HumanTraffic(emulator.seed, emulator.base_url, http).post_chat(
            ada, chats[2], "Yes, ship it."
        )
    answered = await asyncio.wait_for(waiting, BOUND_S + 10)
    assert answered["outcome"] == "reply" and answered["backlog"] == []
    reply = answered["sponsor_reply"]
    assert reply["message_id"] == answer.message_id and reply["chat_id"] == chats[2]
    assert reply["predates_wait"] is False and reply["content"] == "Yes, ship it."

    # The ledger claimed exactly what the three results carried, each once: not Grace's, not the history
    # (a first sight records a chat's newest message as its baseline, delivered to nobody).
    handed = [*backlog, answer.message_id]
    inbound = (await InteractionLog(store).read(InteractionQuery(direction=Direction.IN))).records
    assert sorted((r.message_id, r.action) for r in inbound) == sorted(
        (mid, "delivered") for mid in handed
    )
    assert not {r.message_id for r in inbound} & set(history)
    seen = {
        mid
        for chat in chats
        for mid in json.loads(await store.read_text(TEAMS_CHATS.cursor_key(chat)) or "{}").get(
            "seen_ids_tail", []
        )
    }
    assert set(handed) <= seen and grace_id not in seen  # Grace's stays for a host that can take it
    log = replica.log_path.read_text(errors="replace")
    assert (
        "backlog 0" not in log and "Yes, ship it." not in log
    )  # ids in the log lines, never a body
