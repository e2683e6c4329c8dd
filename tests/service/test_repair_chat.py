"""``entrabot-fleet repair-chat`` as a real process against the Graph emulator and a LocalBackend.

The demo tenant has three chats: a one-on-one whose newest message is a person's, 2 h old,
"Release planning" (newest 30 min old) and "Data science sync" whose newest message is 2 days old.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.seed import demo_seed_path, load_seed
from emulator.server import RunningEmulator, start_emulator
from service.chat_repair import CursorState, inspect_cursor, plan_repair, write_repair
from service.clock import utc_now
from service.devstack.emulator_env import agent_user_env
from service.domain.conversation import TEAMS_CHATS
from service.graph.models import ChatMessage
from service.ledger.claims.chat_cursor import Candidate, decide_claim, parse_chat_cursor
from service.storage.errors import ConcurrencyError
from service.storage.local import LocalBackend

CORRUPT = '{"last_ts": "not a time", "seen_ids_tail": 7}'


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(load_seed(demo_seed_path())) as e:
        yield e


def chat_id_by_topic(emulator: RunningEmulator, topic: str | None) -> str:
    [chat] = [c for c in emulator.state.chats_of(emulator.seed.agent_user.id) if c.topic == topic]
    return chat.id


def messages_of(emulator: RunningEmulator, chat_id: str) -> list[Candidate]:
    """Every message of the chat as a claim candidate, read through Graph's own list (as a replica would)."""
    import httpx

    from service.devstack.traffic import HumanTraffic

    async def read() -> list[Candidate]:
        async with httpx.AsyncClient() as http:
            traffic = HumanTraffic(emulator.seed, emulator.base_url, http)
            chat = emulator.state.chat(chat_id)
            assert chat is not None
            member = next(
                m.user_id for m in chat.members if m.user_id != emulator.seed.agent_user.id
            )
            person = emulator.seed.find_user(member)
            assert person is not None
            token = await traffic.token(person)
            response = await http.get(
                f"{emulator.base_url}/v1.0/chats/{chat_id}/messages?$top=50",
                headers={"Authorization": f"Bearer {token}"},
            )
            response.raise_for_status()
            return [
                Candidate(m["id"], ChatMessage.model_validate(m).created_date_time)
                for m in response.json()["value"]
            ]

    return asyncio.run(read())


def cli_env(emulator: RunningEmulator, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    env.update(agent_user_env(emulator.seed, base_url=emulator.base_url))
    env.update(ENTRABOT_KEEP_MEMORY_LOCAL="true", ENTRABOT_DATA_DIR=str(data_dir))
    env.update(extra)
    return env


def repair(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "repair-chat", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def stored(data_dir: Path, chat_id: str) -> str | None:
    return asyncio.run(LocalBackend(data_dir).read_text(TEAMS_CHATS.cursor_key(chat_id)))


def corrupt(data_dir: Path, chat_id: str) -> None:
    asyncio.run(LocalBackend(data_dir).write_text(TEAMS_CHATS.cursor_key(chat_id), CORRUPT))


def test_without_yes_it_shows_the_new_baseline_and_writes_nothing(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    chat = chat_id_by_topic(emulator, "Data science sync")
    corrupt(tmp_path / "d", chat)
    result = repair(cli_env(emulator, tmp_path / "d"), tmp_path, chat)
    assert result.returncode == 0, result.stderr
    assert "is corrupt" in result.stdout and "new watermark" in result.stdout
    assert "dry run: nothing written" in result.stdout
    assert stored(tmp_path / "d", chat) == CORRUPT


@pytest.mark.parametrize(
    "topic", ["Data science sync", None], ids=["newest-2-days-old", "newest-2-hours-old"]
)
def test_the_newest_message_becomes_the_baseline_and_nothing_the_chat_held_is_claimable(
    topic: str | None, emulator: RunningEmulator, tmp_path: Path
) -> None:
    chat = chat_id_by_topic(emulator, topic)
    corrupt(tmp_path / "d", chat)
    result = repair(cli_env(emulator, tmp_path / "d"), tmp_path, chat, "--yes")
    assert result.returncode == 0, result.stderr
    assert "repaired:" in result.stdout and "never pushed" in result.stdout
    cursor = parse_chat_cursor(stored(tmp_path / "d", chat) or "")
    history = messages_of(emulator, chat)
    newest = max(history, key=lambda c: c.ts)
    assert cursor.last_ts == newest.ts and cursor.bootstrapped
    assert decide_claim(cursor, history).claimable == ()
    # A message created after the repair is claimable as usual.
    assert decide_claim(cursor, [Candidate("9" * 13, utc_now())]).claimable != ()


def test_a_readable_cursor_is_left_alone(emulator: RunningEmulator, tmp_path: Path) -> None:
    chat = chat_id_by_topic(emulator, "Release planning")
    healthy = '{"last_ts": "2026-01-01T00:00:00Z", "seen_ids_tail": [], "bootstrapped": true}'
    asyncio.run(LocalBackend(tmp_path / "d").write_text(TEAMS_CHATS.cursor_key(chat), healthy))
    result = repair(cli_env(emulator, tmp_path / "d"), tmp_path, chat, "--yes")
    assert result.returncode == 0 and "nothing to repair" in result.stdout
    assert stored(tmp_path / "d", chat) == healthy


def test_a_chat_graph_does_not_know_fails_with_one_line_and_writes_nothing(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    chat = "19:no-such-chat@thread.v2"
    corrupt(tmp_path / "d", chat)
    result = repair(cli_env(emulator, tmp_path / "d"), tmp_path, chat, "--yes")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("entrabot-fleet: Graph does not show chat 19:no-such-chat@thread.v2")
    assert stored(tmp_path / "d", chat) == CORRUPT


def test_an_unreachable_graph_fails_with_one_line_naming_ENTRABOT_GRAPH_URL(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    chat = chat_id_by_topic(emulator, "Data science sync")
    corrupt(tmp_path / "d", chat)
    env = cli_env(emulator, tmp_path / "d", ENTRABOT_GRAPH_URL="http://127.0.0.1:9/v1.0")
    result = repair(env, tmp_path, chat, "--yes")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "ENTRABOT_GRAPH_URL (http://127.0.0.1:9/v1.0)" in line and "nothing written" in line
    assert stored(tmp_path / "d", chat) == CORRUPT


def test_missing_agent_settings_name_the_variable_and_write_nothing(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    chat = chat_id_by_topic(emulator, "Data science sync")
    corrupt(tmp_path / "d", chat)
    env = cli_env(emulator, tmp_path / "d")
    del env["ENTRABOT_TENANT_ID"]
    result = repair(env, tmp_path, chat, "--yes")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "ENTRABOT_TENANT_ID" in line
    assert stored(tmp_path / "d", chat) == CORRUPT


def test_two_repairs_at_once_write_exactly_one_cursor(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    chat = chat_id_by_topic(emulator, "Data science sync")
    corrupt(tmp_path / "d", chat)
    env = cli_env(emulator, tmp_path / "d")
    args = [sys.executable, "-m", "service.cli", "repair-chat", chat, "--yes"]
    procs = [
        subprocess.Popen(
            args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    wrote = [out for out, _ in outputs if "repaired:" in out]
    assert len(wrote) == 1
    # The other one either lost the compare-and-swap or read the already repaired cursor.
    [(other_out, other_err)] = [o for o in outputs if "repaired:" not in o[0]]
    assert "changed since it was read" in other_err or "nothing to repair" in other_out
    parse_chat_cursor(stored(tmp_path / "d", chat) or "")


def test_the_repair_write_never_replaces_a_value_changed_after_it_was_read(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    chat = "19:race@thread.v2"

    async def scenario() -> None:
        await backend.write_text(TEAMS_CHATS.cursor_key(chat), CORRUPT)
        found = await inspect_cursor(backend, chat)
        assert found.state is CursorState.CORRUPT
        await backend.write_text(
            TEAMS_CHATS.cursor_key(chat), CORRUPT + " "
        )  # someone else's write in between
        plan = plan_repair(chat, None, now=utc_now())
        with pytest.raises(ConcurrencyError):
            await write_repair(backend, found, plan)
        assert await backend.read_text(TEAMS_CHATS.cursor_key(chat)) == CORRUPT + " "

    asyncio.run(scenario())
