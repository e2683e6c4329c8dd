"""``entrabot-fleet up``: a local fleet a developer connects their own agent to, running until Ctrl-C.

Azurite (its container created), the Graph emulator on the demo tenant and N replicas, exactly as the
demo starts them (``LocalFleet``), but no hosts and no traffic of its own: it prints what connects an
agent and how to make a seeded person post (``entrabot-fleet say``), and leaves a state file for
``say`` to find the emulator with.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from emulator.seed import demo_seed_path, load_seed
from service.devstack.connect_recipe import ConnectRecipe, fleet_command, say_examples
from service.devstack.fleet import DEV_TOKEN, LocalFleet
from service.devstack.local_state import (
    LocalChat,
    LocalFleetState,
    read_state,
    remove_state,
    write_state,
    write_token,
)

# The demo's pace: a person's message reaches a connected host within a couple of seconds, a mail
# within a mail poll.
REPLICA_ENV = {"ENTRABOT_EMAIL_POLL_INTERVAL_S": "10"}
WATCH_EVERY_S = 1.0


class FleetAlreadyRunning(Exception):
    """Another ``up`` holds this state folder."""


@dataclass(frozen=True)
class UpOptions:
    replicas: int
    state_dir: Path


def run_up(options: UpOptions, out: TextIO = sys.stdout) -> int:
    running = read_state(options.state_dir)
    if running is not None:
        raise FleetAlreadyRunning(
            f"a local fleet is already running (pid {running.pid}, state in {options.state_dir}); "
            "stop it with Ctrl-C, or pass --state-dir for a second one"
        )
    workdir = options.state_dir / "run"
    shutil.rmtree(workdir, ignore_errors=True)  # the previous run's logs and data folders
    seed = load_seed(demo_seed_path())
    fleet = LocalFleet(seed, workdir, replicas=options.replicas, extra_env=dict(REPLICA_ENV))
    stop = threading.Event()
    # Until the fleet is up, SIGTERM interrupts the start as Ctrl-C does, so what started is stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    replicas = f"{options.replicas} replica{'s' if options.replicas != 1 else ''}"
    _say(
        out,
        f"Starting Azurite, the Graph emulator and {replicas} (logs in {workdir}) …",
    )
    try:
        fleet.start()  # Ctrl-C meanwhile is a KeyboardInterrupt: what started is stopped below
        # From here a signal only asks to stop: a second Ctrl-C cannot cut the stop short.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        state = _publish(fleet, options.state_dir)
        _print_fleet(fleet, state, out)
        _say(out, "Running; Ctrl-C stops everything.")
        _watch(fleet, stop, out)
    finally:
        _say(out, "Stopping …")
        took = fleet.stop()
        remove_state(options.state_dir, os.getpid())
        replicas_took = ", ".join(f"{k} in {v:.1f} s" for k, v in took.items())
        _say(out, f"Stopped{': ' + replicas_took if replicas_took else ''}.")
    return 0


def _publish(fleet: LocalFleet, state_dir: Path) -> LocalFleetState:
    assert fleet.emulator is not None
    token_file = write_token(state_dir, DEV_TOKEN)
    names = {u.id: u.display_name for u in fleet.seed.users}
    agent_id = fleet.seed.agent_user.id
    chats = [
        LocalChat(
            chat.id,
            chat.topic,
            [names.get(m.user_id, m.user_id) for m in chat.members if m.user_id != agent_id],
        )
        for chat in fleet.emulator.state.chats_of(agent_id)
    ]
    state = LocalFleetState(
        pid=os.getpid(),
        emulator_url=fleet.emulator.base_url,
        mcp_urls=[m.mcp_url for m in fleet.members],
        token_file=str(token_file),
        chats=chats,
    )
    write_state(state_dir, state)
    return state


def _print_fleet(fleet: LocalFleet, state: LocalFleetState, out: TextIO) -> None:
    assert fleet.azurite is not None and fleet.emulator is not None
    recipe = ConnectRecipe(
        state.mcp_urls[0], Path(state.token_file), DEV_TOKEN, tuple(fleet_command())
    )
    lines = [
        f"  Azurite ({fleet.azurite.kind}) {fleet.azurite.blob_endpoint}, "
        f"container {fleet.container}",
        f"  Graph emulator {fleet.emulator.base_url}, tenant {fleet.seed.tenant_domain}",
        *(f"  {m.name} ready at {m.mcp_url}" for m in fleet.members),
        f"  local token {DEV_TOKEN} (every replica's ENTRABOT_MCP_STATIC_TOKENS), "
        f"in {state.token_file}",
        "",
        "Connect Claude Code through the channel bridge (stdio), then start it with the channel:",
        f"  {recipe.claude_mcp_add()}",
        f"  {recipe.claude_start()}",
        "  (leave out --push where Claude Code's channels are not available to you: tools only)",
        "or put this in the project's .mcp.json:",
        *(f"  {line}" for line in recipe.mcp_json().splitlines()),
        "Connect Codex (streamable HTTP; messages through the receive_messages inbox): in ~/.codex/config.toml",
        *(f"  {line}" for line in recipe.codex_toml().splitlines()),
        f"  and in Codex's environment: {recipe.codex_env()}",
        "",
        "Make a seeded person post; the agent user's chats (say --chat N):",
        *(f"  {i + 1}  {state.chat_label(i)}" for i in range(len(state.chats))),
    ]
    first = state.chats[0].member_names[0].split()[0] if state.chats else "Ada"
    humans = [u for u in fleet.seed.humans if u.display_name]
    mail_from = humans[1].display_name.split()[0] if len(humans) > 1 else first
    lines += [f"  {line}" for line in say_examples(recipe.fleet, first, mail_from)]
    _say(out, "\n".join(lines))


def _watch(fleet: LocalFleet, stop: threading.Event, out: TextIO) -> None:
    """Until Ctrl-C (or SIGTERM); a replica that exits on its own is said once, with its log."""
    gone: set[str] = set()
    while not stop.wait(WATCH_EVERY_S):
        for member in fleet.members:
            if member.name not in gone and not member.alive:
                gone.add(member.name)
                _say(out, f"{member.name} exited; its log: {member.log_path}")


def _say(out: TextIO, text: str) -> None:
    print(text, file=out, flush=True)
