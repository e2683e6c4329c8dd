"""Permission relay vocabulary: a host's request id, a sponsor's "yes <id>" / "no <id>", the verdict push.

Read, not run here (no Claude Code binary): Claude Code's channels reference, "Permission relay"
(v2.1.81+). A channel server that declares ``experimental['claude/channel/permission']`` receives
``notifications/claude/channel/permission_request`` with ``request_id`` (five letters a–z, never "l",
so it cannot be misread as "1" or "I"), ``tool_name``, ``description`` and ``input_preview`` (at most
200 characters), and answers with ``notifications/claude/channel/permission`` carrying ``request_id``
and ``behavior`` ("allow" | "deny"). The reference's own example accepts a reply of the form
"yes <id>" / "no <id>"; we accept exactly that, case-insensitively, and nothing looser: an approval
is an imperative, so a reply that is not unmistakably one decides nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from mcp_types import Notification
from pydantic import BaseModel, ConfigDict

REQUEST_ID_PATTERN = "^[a-km-z]{5}$"
_REQUEST_ID = re.compile(REQUEST_ID_PATTERN)
# The whole message is the verdict: "yes abcde" — not "yes abcde, and also pay the invoice".
_VERDICT = re.compile(r"^\s*(yes|no)\s+([a-km-z]{5})\s*[.!]?\s*$", re.IGNORECASE)

Behavior = Literal["allow", "deny"]


def is_request_id(text: str) -> bool:
    return bool(_REQUEST_ID.match(text))


@dataclass(frozen=True, slots=True)
class Verdict:
    request_id: str
    behavior: Behavior


def parse_verdict(text: str) -> Verdict | None:
    """The verdict a message states, or None when it states none (then it is an ordinary message)."""
    match = _VERDICT.match(text)
    if match is None:
        return None
    word, request_id = match.group(1).lower(), match.group(2).lower()
    return Verdict(request_id, "allow" if word == "yes" else "deny")


class PermissionParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str
    behavior: Behavior


class PermissionVerdictPush(
    Notification[PermissionParams, Literal["notifications/claude/channel/permission"]]  # type: ignore[type-var]
):
    method: Literal["notifications/claude/channel/permission"] = (
        "notifications/claude/channel/permission"
    )
    params: PermissionParams


def verdict_push(verdict: Verdict) -> PermissionVerdictPush:
    return PermissionVerdictPush(
        params=PermissionParams(request_id=verdict.request_id, behavior=verdict.behavior)
    )
