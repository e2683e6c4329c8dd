"""Which hosts can take channel pushes, decided from the name the host gives in ``clientInfo``.

By default only the channel bridge run with ``--push`` (``entrabot-fleet channel``) is a push host: it
introduces itself as ``BRIDGE_PUSH_CLIENT_NAME`` and re-emits pushes on stdio, the one transport Claude
Code documents channel events for. A Claude Code session connected straight over HTTP introduces
itself as ``claude-code``, and nothing in its initialize says whether it loaded a channel; Claude
Code drops channel events silently when it did not (its channels reference, read, not run here), so
a push to it would be marked delivered and lost. Such a session fails closed to a non-push host,
which takes messages and sponsor waits through the tools. Operators who know better list more names
in ``ENTRABOT_PUSH_HOSTS``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The name the bridge gives the fleet when the operator said the host loaded the channel (--push);
# the default of ENTRABOT_PUSH_HOSTS (service/config.py holds the same literal, checked by a test).
BRIDGE_PUSH_CLIENT_NAME = "claude-code-channel-bridge"

# A host name may extend a configured name only after one of these, so a configured "claude-code"
# matches "claude-code-vscode" and "claude-code/2.1" but not "claude-coder".
_SUFFIX_SEPARATORS = "-_./ @+:"


def parse_push_hosts(value: str) -> tuple[str, ...]:
    """The configured push-host names (``ENTRABOT_PUSH_HOSTS``, comma-separated), normalised."""
    return tuple(dict.fromkeys(_normalise(name) for name in value.split(",") if name.strip()))


def is_push_host(client_name: str | None, push_hosts: Iterable[str]) -> bool:
    """True when ``client_name`` is one of ``push_hosts``, ignoring case and a trailing suffix."""
    if not client_name:
        return False
    name = _normalise(client_name)
    for host in push_hosts:
        if name == host or (name.startswith(host) and name[len(host)] in _SUFFIX_SEPARATORS):
            return True
    return False


def _normalise(name: str) -> str:
    return re.sub(r"\s+", " ", name.strip().lower())
