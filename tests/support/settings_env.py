"""Settings from an ENTRABOT_* mapping, parsed by the service's own ``Settings`` model.

Storage tests describe a backend as the environment that selects it (a race's child processes get
the same mapping as their environment); this turns such a mapping into the ``Settings`` object the
service would build from it, without reading ``.env``.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from service.config import Settings

PREFIX = "ENTRABOT_"


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
    fields = {name.removeprefix(PREFIX).lower(): value for name, value in env.items() if name.startswith(PREFIX)}
    return _MappingOnlySettings(**fields)
