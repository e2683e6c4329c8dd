"""Benchmark: a person's Teams post → the real Claude Code's model request carrying it as a ``<channel>`` block.

    python -m bench.claude_code_latency [--quick] [--results DIR]

One replica process on Azurite and the Graph emulator, ``entrabot-fleet channel --push`` spawned by
the pinned Claude Code (tests/claude_code/host) in tmux with the development channel loaded, talking to
the fake Messages API: the same harness as tests/claude_code (imported, not copied). Messages are
posted one at a time (each waits for the previous one's model request), in two change-detection modes
with the service's default intervals: ``ordered`` (the chat scan) and ``notifications`` (Graph change
notifications, which the emulator delivers ``NOTIFICATION_LATENCY_MS`` late, as in the change-detection
benchmark).

Split of each sample: post → Claude Code logs the ``notifications/claude/channel`` it read from the
bridge's stdout (its ``--debug-file``, millisecond wall clock), and that → the model request. The first
part holds the fleet's change detection, its push and the bridge; the bridge's own part of it (fleet
stream → stdout) is measured alone by ``bridge_latency``.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.change_detection_fleet import NOTIFICATION_LATENCY_MS, mode_env, mode_seed
from bench.report import envelope, load_average, machine_line, markdown_table
from bench.session import BenchSession, run_standalone
from bench.stats import summarize

# This benchmark drives the test harness, whose modules import tests/support by the bare names pytest's
# `pythonpath` setting gives them; outside pytest that folder goes on the path here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from tests.bridge.fleet_stack import bridge_fleet
from tests.claude_code.claude_kit import ClaudeStack, interactive_claude, write_token_file
from claude_home import CLAUDE_CODE_VERSION
from fake_anthropic import fake_anthropic
from loopback_netns import unix_forwards

NAME = "claude_code_latency"
MODES = ("ordered", "notifications")
TARGET_P50_S, TARGET_P99_S = 1.0, 2.0
SAMPLE_TIMEOUT_S = 30.0
CHANNEL_READ = re.compile(
    r"^(\S+) \[DEBUG\] MCP server \"entrabot\": notifications/claude/channel \(", re.M
)


def _channel_reads(debug_log: Path) -> list[float]:
    text = debug_log.read_text(errors="replace") if debug_log.exists() else ""
    return [
        datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
        for m in CHANNEL_READ.finditer(text)
    ]


async def _wait(condition: Any, what: str, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s")
        await asyncio.sleep(0.01)
    return value


async def measure_mode(
    session: BenchSession, mode: str, samples: int, interval_s: float
) -> dict[str, Any]:
    workdir = session.scratch(f"{NAME}-{mode}")
    azurite = await session.azurite()
    total: list[float] = []
    to_host: list[float] = []
    in_host: list[float] = []
    async with (
        bridge_fleet(
            azurite, workdir / "fleet", replicas=1, seed=mode_seed(mode, 3), env=mode_env(mode)
        ) as fleet,
        fake_anthropic() as api,
    ):
        stack = ClaudeStack(
            fleet, api, workdir / "sockets", write_token_file(workdir / "fleet-token")
        )
        home = stack.home(workdir / "claude")
        home.mcp_json({"entrabot": stack.bridge_server("--push")})
        async with (
            unix_forwards(stack.sockets, stack.ports()),
            interactive_claude(
                stack, home, "--dangerously-load-development-channels", "server:entrabot"
            ) as claude,
        ):
            await claude.confirm_channels()
            await fleet.wait_bootstrapped()
            sponsors = {s.id for s in fleet.seed.sponsors}
            chat_id, human_id = next(
                (c, m) for c, members in fleet.chats() for m in members if m not in sponsors
            )
            human = fleet.seed.find_user(human_id)
            assert human is not None
            for i in range(samples):
                reads_before = len(_channel_reads(home.debug_log))
                posted_at = time.time()
                posted = await fleet.traffic.post_chat(human, chat_id, f"bench {mode} {i}")
                request = await _wait(
                    lambda: next(
                        (
                            r
                            for r in api.model.agent_requests()  # noqa: B023
                            if posted.message_id in r.last_user_text()
                        ),
                        None,
                    ),  # noqa: B023
                    f"sample {i} at the model",
                    SAMPLE_TIMEOUT_S,
                )
                reads = await _wait(
                    lambda: _channel_reads(home.debug_log)[reads_before:],  # noqa: B023
                    f"Claude Code's debug line for sample {i}",
                    5.0,
                )
                total.append(request.received_at - posted_at)
                to_host.append(reads[0] - posted_at)
                in_host.append(request.received_at - reads[0])
                await asyncio.sleep(interval_s)
    summary = summarize(total)
    assert summary.p50 is not None and summary.p99 is not None
    return {
        "post_to_model_s": summary.as_dict(3),
        "post_to_claude_code_s": summarize(to_host).as_dict(3),
        "claude_code_to_model_s": summarize(in_host).as_dict(3),
        "meets_target": summary.p50 <= TARGET_P50_S and summary.p99 <= TARGET_P99_S,
    }


async def run(session: BenchSession) -> dict[str, Any]:
    samples = {"full": 100, "quick": 20}.get(session.profile.name, 5)
    parameters = {
        "samples": samples,
        "interval_s": 0.5,
        "modes": list(MODES),
        "claude_code": CLAUDE_CODE_VERSION,
    }
    started = load_average()
    modes = {mode: await measure_mode(session, mode, samples, 0.5) for mode in MODES}
    return {
        **envelope(NAME, session.profile.name, parameters, started),
        "modes": modes,
        "target_s": {"p50": TARGET_P50_S, "p99": TARGET_P99_S},
    }


def markdown(result: dict[str, Any]) -> str:
    rows = []
    for mode, m in result["modes"].items():
        t, h, c = m["post_to_model_s"], m["post_to_claude_code_s"], m["claude_code_to_model_s"]
        rows.append(
            [
                mode,
                t["count"],
                t["p50"],
                t["p99"],
                t["max"],
                h["p50"],
                h["p99"],
                c["p50"],
                c["p99"],
                "meets" if m["meets_target"] else "MISSES",
            ]
        )
    table = markdown_table(
        [
            "mode",
            "samples",
            "p50 s",
            "p99 s",
            "max s",
            "→ Claude Code p50",
            "p99",
            "Claude Code → model p50",
            "p99",
            "target",
        ],
        rows,
    )
    target = result["target_s"]
    return (
        f"## The real Claude Code {result['parameters']['claude_code']}: a Teams post → the model's request "
        f"with its `<channel>` block\n\n{table}\n\nTarget p50 ≤ {target['p50']} s, p99 ≤ {target['p99']} s. "
        f"The notifications mode includes the emulator's {NOTIFICATION_LATENCY_MS} ms notification latency. "
        '"→ Claude Code" ends where Claude Code logs the channel notification it read from the bridge '
        "(change detection, the push and the bridge; the bridge alone: `bridge_latency`).\n\n"
        f"{machine_line(result)}\n"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_standalone(NAME, run, markdown, argv, description=__doc__ or NAME)


if __name__ == "__main__":
    main(sys.argv[1:])
