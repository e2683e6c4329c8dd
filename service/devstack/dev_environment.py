"""The one module of the local tooling (``service/devstack``) that reads the environment.

The tooling is not the replica: it starts Azurite, the emulator and replica processes for the demo,
the tests and the benchmarks. What it takes from its environment comes from here, in two parts:

* ``DevstackSettings``: its own ENTRABOT_AZURITE* settings, read like the replica's (the environment,
  then an optional ``.env`` in the working directory), so a value put in ``.env`` is honoured here too.
* ``replica_environment()``: what a replica it launches starts from. The replica's settings are the
  ones the launcher gives it and nothing else: no ENTRABOT_* name of this process reaches it, and it
  runs in the fleet's work directory (``LocalFleet``), where no ``.env`` is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SOURCE_ROOT = Path(__file__).resolve().parents[2]
PREFIX = "ENTRABOT_"


class DevstackSettingsError(ValueError):
    """A tooling setting that cannot be parsed; the message names it, on one line."""


class DevstackSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=PREFIX, env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    # ENTRABOT_AZURITE: how Azurite is started. "npm": the pinned npm build under azurite_dir, as a
    # node process. "testcontainers": a container of azurite_image, on the Docker engine DOCKER_HOST
    # names (else the local socket). Either way it listens on 127.0.0.1 only.
    azurite: Literal["npm", "testcontainers"] = "npm"
    # ENTRABOT_AZURITE_DIR: where the pinned npm Azurite is installed (`npm ci` there).
    azurite_dir: Path = SOURCE_ROOT / "azurite"
    # ENTRABOT_AZURITE_IMAGE: the image "testcontainers" runs: Microsoft's of the release
    # azurite/package.json pins, or one built from azurite/Dockerfile where no registry is reachable.
    azurite_image: str = "mcr.microsoft.com/azure-storage/azurite:3.37.0"
    # ENTRABOT_AZURITE_NO_DOCKER chose npm over a Docker engine found by chance; refused now, so a value
    # left in an environment or .env is not silently read as something else.
    azurite_no_docker: str | None = None

    @field_validator("azurite_no_docker")
    @classmethod
    def _retired(cls, value: str | None) -> None:
        if value is not None:
            raise ValueError(
                "retired: Azurite is the npm build unless ENTRABOT_AZURITE=testcontainers; "
                "remove this setting"
            )
        return None


def load_devstack_settings() -> DevstackSettings:
    try:
        return DevstackSettings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = PREFIX + str(first["loc"][0]).upper() if first.get("loc") else "a devstack setting"
        raise DevstackSettingsError(f"{name}: {first['msg']}") from None


def replica_environment() -> dict[str, str]:
    """This process's environment without its ENTRABOT_* names (PATH, HOME and the like still pass),
    with this source tree first on PYTHONPATH: a replica started in another directory runs the code
    that started it."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(PREFIX)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SOURCE_ROOT), env.get("PYTHONPATH")) if p)
    return env
