"""A fleet answering 401, 403, 5xx, garbage or nothing: the bridge says why on stderr and keeps serving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bridge.bridge_host import bridge_host
from tests.bridge.broken_fleet import Fault, broken_fleet
from tests.mcp.server_fixture import eventually

# What the one stderr line must name, per fault.
REASONS = {
    Fault.UNAUTHORIZED: "401",
    Fault.FORBIDDEN: "403",
    Fault.SERVER_ERROR: "503",
    Fault.GARBAGE: "not MCP",
    Fault.SILENCE: "did not answer in time",
}


def _warnings(log: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [line for line in lines if line.get("level") == "WARNING"]


@pytest.mark.parametrize("fault", list(Fault), ids=[f.value for f in Fault])
async def test_broken_fleet_is_reported_on_stderr_and_the_host_is_still_served(
    fault: Fault, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    async with broken_fleet(fault) as fleet:
        async with bridge_host(fleet.url, log, args=("--push", "--request-timeout", "1")) as (
            client,
            _,
        ):
            for _ in range(2):  # still answering after the first failure
                result = await client.call_tool(
                    "send_teams_message", {"chat_id": "x", "text": "hi"}
                )
                assert result.is_error
                [text] = [c.text for c in result.content if c.type == "text"]
                assert "fleet" in text
            # By the second call the first attempt has failed: the model is told why, as the log is.
            assert REASONS[fault] in text and fleet.url in text, text
            # It keeps trying.
            await eventually(
                lambda: fleet.requests >= 2, "a second attempt at the fleet", timeout_s=30
            )
            reasons = [str(w.get("reason", "")) for w in _warnings(log)]
            assert any(REASONS[fault] in reason for reason in reasons), reasons
    # Every stderr line is one JSON object, and no line repeats a reason already given.
    warnings = _warnings(log)
    assert all(
        a.get("reason") != b.get("reason") for a, b in zip(warnings, warnings[1:], strict=False)
    )
