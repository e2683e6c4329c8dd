"""The wire contract between an acknowledging host (the channel bridge) and the fleet.

* At ``initialize`` the host names itself in the ``X-Entrabot-Host-Id`` header: a stable identity of
  its own (the bridge's ``--host-id``, or one derived from the fleet URL and the project folder), the
  same across reconnects, replicas and its own restarts. A push session that names itself is an
  acknowledging host: what the fleet claims for it is owed to it until it acknowledges.
* After writing a ``notifications/claude/channel`` push to its own host (Claude Code's stdin), it sends
  ``notifications/entrabot/delivered`` with ``{"keys": [[chat_id, message_id], ...]}`` (the push's meta),
  and again for a repeat it dropped, since a repeat means the fleet did not see the first one.

A header, not a field of ``initialize``: the SDK's client offers no place for a field of our own there,
and every request of the session passes the same HTTP client anyway. Anyone holding the fleet's token
can name any host; the token already grants every delivery's content (``catch_up``), so the name is an
identity, not a credential.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

HOST_ID_HEADER = "x-entrabot-host-id"
ACK_METHOD = "notifications/entrabot/delivered"
MAX_ACK_KEYS = 500
_HOST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:~-]{0,127}")


def valid_host_id(value: str | None) -> str | None:
    """The host id as given when it is one (letters, digits and ``._:~-``, at most 128); else None."""
    if value is None:
        return None
    value = value.strip()
    return value if _HOST_ID.fullmatch(value) else None


class DeliveredParams(BaseModel):
    model_config = ConfigDict(extra="ignore")
    keys: list[tuple[str, str]] = Field(max_length=MAX_ACK_KEYS)
