"""Which hosts can take channel pushes, decided from the name the host gives in ``clientInfo``.

Claude Code identifies itself as ``claude-code`` and may add a suffix (``claude-code-vscode``,
``Claude-Code/2.1``); every other host is a non-push host that gets sponsor waits through tools.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# A host name may extend a configured name only after one of these, so "claude-code" matches
# "claude-code-vscode" and "claude-code/2.1" but not "claude-coder".
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
