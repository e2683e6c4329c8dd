"""One settings path: what ``.env`` says reaches storage resolution exactly as the environment does.

A container named only in ``.env`` used to be seen by ``Settings`` and ignored by the resolution,
which read ``os.environ``: the replica quietly started on an empty local store.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.seed import build_seed
from service.config import load_settings
from service.devstack.azurite import Azurite
from service.devstack.emulator_env import agent_user_env
from service.replica import build_replica
from service.storage import BlobBackend

SERVICE = Path(__file__).resolve().parents[2] / "service"
UNREACHABLE = "http://127.0.0.1:1"  # nothing is contacted: these tests stop before any network call


def write_dotenv(directory: Path, settings: dict[str, str]) -> None:
    (directory / ".env").write_text("".join(f"{name}={value}\n" for name, value in settings.items()))


def without_entrabot_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("ENTRABOT_", "AZURE_")):
            monkeypatch.delenv(name)


async def test_dotenv_alone_configures_blob_storage(
    azurite: Azurite, container_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_entrabot_environment(monkeypatch)
    monkeypatch.chdir(tmp_path)
    write_dotenv(tmp_path, {
        **agent_user_env(build_seed(chats=1), base_url=UNREACHABLE),
        "ENTRABOT_DATA_DIR": str(tmp_path / "data"),
        "ENTRABOT_BLOB_ENDPOINT": azurite.blob_endpoint,
        "ENTRABOT_BLOB_CONTAINER": container_name,
        "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
    })
    replica = build_replica(load_settings())
    try:
        assert isinstance(replica.backend, BlobBackend) and replica.is_cloud
        assert replica.backend.describe() == f"BlobBackend endpoint={azurite.blob_endpoint} container={container_name}"
    finally:
        await replica.stop()
    assert not (tmp_path / "data").exists()


def test_a_half_blob_configuration_in_dotenv_refuses_to_start(tmp_path: Path) -> None:
    write_dotenv(tmp_path, {
        **agent_user_env(build_seed(chats=1), base_url=UNREACHABLE),
        "ENTRABOT_DATA_DIR": str(tmp_path / "data"),
        "ENTRABOT_BLOB_ENDPOINT": "http://127.0.0.1:1/devstoreaccount1",
    })
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    result = subprocess.run([sys.executable, "-m", "service.cli", "serve"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("entrabot-fleet: ") and "ENTRABOT_BLOB_CONTAINER" in line
    assert not (tmp_path / "data").exists()


def test_only_the_config_module_reads_the_environment() -> None:
    # devstack is the local tooling that launches replicas: it builds their environments. The channel
    # bridge is a separate program (a host's stdio process): its entry point hands the environment to
    # its own config module, once, as a mapping.
    readers = sorted(
        path.relative_to(SERVICE.parent).as_posix()
        for path in SERVICE.rglob("*.py")
        if "devstack" not in path.parts and re.search(r"os\.environ|os\.getenv|getenv\(", path.read_text())
    )
    assert readers == ["service/bridge/cli_options.py", "service/config.py"]
