"""The bridge remembers what it wrote to its host across restarts: a repeat is dropped, nothing is lost."""

from __future__ import annotations

import json
from pathlib import Path

from service.bridge.config import HOST_ID_ENV
from service.bridge.written_log import STATE_DIR_ENV, WrittenLog, host_identity
from tests.bridge.bridge_host import bridge_host
from tests.mcp.server_fixture import LiveMcp, chat_message, eventually


def test_keys_written_come_back_on_the_next_run_and_the_file_stays_bounded(tmp_path: Path) -> None:
    first = WrittenLog.open(tmp_path, "host-a", capacity=3)
    for n in range(10):
        key = ("19:chat", f"m-{n}")
        assert first.window.first_sight(
            key
        )  # as the host server marks it when it queues the message
        first.written(key)
    lines = (tmp_path / "host-a.jsonl").read_text().splitlines()
    assert len(lines) <= 2 * 3  # compacted
    again = WrittenLog.open(tmp_path, "host-a", capacity=3)
    assert not again.window.first_sight(("19:chat", "m-9")) and not again.window.first_sight(
        ("19:chat", "m-7")
    )
    assert again.window.first_sight(
        ("19:chat", "m-1")
    )  # older than the window: forgotten, as in memory
    other = WrittenLog.open(tmp_path, "host-b", capacity=3)
    assert other.window.first_sight(("19:chat", "m-9"))  # another host's file


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "h.jsonl").write_text(json.dumps(["c", "m-1"]) + "\n" + '["c", "m-')
    log = WrittenLog.open(tmp_path, "h", capacity=10)
    assert not log.window.first_sight(("c", "m-1")) and log.window.first_sight(("c", "m-2"))


def test_an_unusable_state_folder_keeps_the_bridge_running_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    log = WrittenLog.open(blocker / "state", "h", capacity=10)
    log.written(("c", "m-1"))  # no error: remembered for this run only
    assert log.window.first_sight(("c", "m-2"))


def test_the_host_identity_is_stable_per_fleet_and_project() -> None:
    assert host_identity("https://f/mcp", "/repo") == host_identity("https://f/mcp", "/repo")
    assert host_identity("https://f/mcp", "/repo") != host_identity("https://f/mcp", "/other")
    assert host_identity("https://f/mcp", "/repo", "named") == "named"


async def test_a_restarted_bridge_does_not_pass_a_message_on_twice(
    live: LiveMcp, tmp_path: Path
) -> None:
    env = {STATE_DIR_ENV: str(tmp_path / "state"), HOST_ID_ENV: "claude-in-repo"}
    async with bridge_host(live.url, tmp_path / "bridge.log", env=env) as (_, received):
        await eventually(live.push_targets, "the first bridge's push stream")
        await live.hub.dispatch([chat_message("m-1")])
        await eventually(lambda: received.message_ids() == ["m-1"], "m-1 on the host")
    await eventually(lambda: not live.push_targets(), "the first bridge's session to end")

    # Claude Code restarts the stdio server; the fleet hands m-1 over again (a redelivery), then m-2.
    async with bridge_host(live.url, tmp_path / "bridge.log", env=env) as (_, received):
        await eventually(live.push_targets, "the restarted bridge's push stream")
        await live.hub.dispatch([chat_message("m-1"), chat_message("m-2")])
        await eventually(
            lambda: received.message_ids() == ["m-2"], "m-2 alone on the host"
        )  # m-1 came first
    await eventually(lambda: not live.push_targets(), "the restarted bridge's session to end")

    # Another host identity (another project) has its own file: it gets m-1.
    async with bridge_host(
        live.url, tmp_path / "bridge.log", env={**env, HOST_ID_ENV: "claude-elsewhere"}
    ) as (_, received):
        await eventually(live.push_targets, "the other host's push stream")
        await live.hub.dispatch([chat_message("m-1")])
        await eventually(lambda: received.message_ids() == ["m-1"], "m-1 on the other host")
