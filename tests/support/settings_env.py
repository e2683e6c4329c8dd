"""Settings from an ENTRABOT_* mapping, parsed by the service's own ``Settings`` model.

Storage tests describe a backend as the environment that selects it (a race's child processes get
the same mapping as their environment); this turns such a mapping into the ``Settings`` object the
service would build from it, without reading ``.env``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from emulator.seed import ThrottleBudget
from service.config import Settings

PREFIX = "ENTRABOT_"

# Harnesses whose tests drive the workers' cycles themselves, back to back, on an emulator roomy
# enough for it: the elected scanner scans on every cycle, every email cycle polls (the fleet's poll
# turn is always due), no read waits for another replica's turn, and a chat may be read again at once.
# Settings field names.
HAND_DRIVEN_CYCLES: dict[str, float] = {
    "chat_scan_interval_s": 0.001,
    "chat_scan_active_interval_s": 0.001,
    "email_poll_interval_s": 0.001,
    "chat_read_spread_s": 0.0,
    "chat_read_gap_s": 0.0,
}


# The emulator budget such harnesses run on: Graph's limits lifted, the per-chat one too (a cycle right
# after a first sight reads the chat again at once, which Graph's one read a second per chat refuses).
ROOMY_BUDGET = ThrottleBudget(chat_messages_per_s=1000, other_per_s=1000, per_chat_per_s=None)


def as_env(fields: Mapping[str, object]) -> dict[str, str]:
    """Settings fields as the ENTRABOT_* mapping that selects them."""
    return {f"{PREFIX}{name.upper()}": str(value) for name, value in fields.items()}


class _MappingOnlySettings(Settings):
    """The service's Settings, validated the same way, but fed from the mapping alone: neither this
    test process's environment nor a ``.env`` file can leak into it."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def settings_from_env(env: Mapping[str, str]) -> Settings:
    # Any: which fields the names are is known only at run time, where the model parses and checks them.
    fields: dict[str, Any] = {
        name.removeprefix(PREFIX).lower(): value
        for name, value in env.items()
        if name.startswith(PREFIX)
    }
    return _MappingOnlySettings(**fields)
