"""A throwaway ``HOME`` for the real Claude Code, with its first-run state pre-seeded, and its environment.

What is seeded and why (TOOLCHAIN.md, "The real Claude Code": each key was run on 2.1.332):
- onboarding, theme, release notes, the auto-mode notice: no first-run screens in a tmux session;
- ``customApiKeyResponses.approved``: the fake key's last 20 characters, so no "use this key?" prompt;
- ``projects[<project>]``: the folder's trust dialog accepted and its ``.mcp.json`` servers enabled;
- ``officialMarketplaceAutoInstallAttempted``: otherwise it tries to clone the plugin marketplace;
- ``cachedGrowthBookFeatures`` ``tengu_harbor`` (channels) and ``tengu_harbor_permissions`` (the
  permission relay): Claude Code gates channels on its own rollout flags, fetched from Anthropic, and
  they are off when it cannot reach Anthropic ("channels feature is not currently available" in its
  debug log). With ``CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1`` it reads this disk cache even with
  telemetry off. A TEST-ONLY override of a flag Anthropic controls: users never set it; a real user's
  Claude Code receives the flag from Anthropic.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CLAUDE_CODE_VERSION = "2.1.332"  # the pin in tests/claude_code/host/package.json
CHANNEL_FLAGS = {"tengu_harbor": True, "tengu_harbor_permissions": True}


@dataclass(frozen=True)
class ClaudeHome:
    home: Path
    project: Path

    @property
    def debug_log(self) -> Path:
        return self.home / "claude-debug.log"

    def mcp_json(self, servers: dict[str, object]) -> None:
        (self.project / ".mcp.json").write_text(json.dumps({"mcpServers": servers}, indent=2))


def seed_claude_home(root: Path, *, api_key: str, allow: Sequence[str] = ()) -> ClaudeHome:
    home, project = root / "home", root / "project"
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    project.mkdir(parents=True, exist_ok=True)
    state = {
        "hasCompletedOnboarding": True,
        "lastOnboardingVersion": CLAUDE_CODE_VERSION,
        "lastReleaseNotesSeen": CLAUDE_CODE_VERSION,
        "theme": "dark",
        "hasSeenAutoDefaultNotice": True,
        "officialMarketplaceAutoInstallAttempted": True,
        "customApiKeyResponses": {"approved": [api_key[-20:]], "rejected": []},
        "cachedGrowthBookFeatures": CHANNEL_FLAGS,
        "projects": {
            str(project.resolve()): {
                "hasTrustDialogAccepted": True,
                "hasCompletedProjectOnboarding": True,
                "enabledMcpjsonServers": ["entrabot"],
                "allowedTools": [],
            }
        },
    }
    (home / ".claude.json").write_text(json.dumps(state, indent=2))
    settings = {"enableAllProjectMcpServers": True, "permissions": {"allow": list(allow)}}
    (home / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2))
    return ClaudeHome(home, project.resolve())


def claude_environment(
    home: ClaudeHome, *, api_base_url: str, api_key: str, path_prefix: Path
) -> dict[str, str]:
    """Claude Code's environment: the fake API, no non-essential traffic, the throwaway HOME."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if k in {"LANG", "LC_ALL", "TERM", "TMPDIR", "PYTHONPATH"} or k.startswith("LC_")
    }
    return {
        **keep,
        "HOME": str(home.home),
        "PATH": f"{path_prefix}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANTHROPIC_BASE_URL": api_base_url,
        "ANTHROPIC_API_KEY": api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF": "1",  # test-only: read the seeded flags above
    }
