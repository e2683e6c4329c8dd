"""One settings path: what ``.env`` says reaches storage resolution exactly as the environment does.

A container named only in ``.env`` used to be seen by ``Settings`` and ignored by the resolution,
which read ``os.environ``: the replica quietly started on an empty local store.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.seed import build_seed
from service.config import load_settings
from service.devstack.azurite import Azurite
from service.devstack.emulator_env import agent_user_env
from service.replica_build import build_replica
from service.storage.blob import BlobBackend
from service.telemetry.metrics import Metrics

SERVICE = Path(__file__).resolve().parents[2] / "service"
UNREACHABLE = "http://127.0.0.1:1"  # nothing is contacted: these tests stop before any network call


def write_dotenv(directory: Path, settings: dict[str, str]) -> None:
    (directory / ".env").write_text(
        "".join(f"{name}={value}\n" for name, value in settings.items())
    )


def without_entrabot_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("ENTRABOT_", "AZURE_")):
            monkeypatch.delenv(name)


async def test_dotenv_alone_configures_blob_storage(
    azurite: Azurite, container_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_entrabot_environment(monkeypatch)
    monkeypatch.chdir(tmp_path)
    write_dotenv(
        tmp_path,
        {
            **agent_user_env(build_seed(chats=1), base_url=UNREACHABLE),
            "ENTRABOT_DATA_DIR": str(tmp_path / "data"),
            "ENTRABOT_BLOB_ENDPOINT": azurite.blob_endpoint,
            "ENTRABOT_BLOB_CONTAINER": container_name,
            "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
        },
    )
    replica = build_replica(load_settings(), metrics=Metrics())
    try:
        assert isinstance(replica.backend, BlobBackend) and replica.is_cloud
        assert (
            replica.backend.describe()
            == f"BlobBackend endpoint={azurite.blob_endpoint} container={container_name}"
        )
    finally:
        await replica.stop()
    assert not (tmp_path / "data").exists()


def serve_with_dotenv(tmp_path: Path, settings: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``serve`` started in ``tmp_path`` whose ``.env`` holds an agent-user setup plus ``settings``."""
    write_dotenv(
        tmp_path,
        {
            **agent_user_env(build_seed(chats=1), base_url=UNREACHABLE),
            "ENTRABOT_DATA_DIR": str(tmp_path / "data"),
            **settings,
        },
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_half_blob_configuration_in_dotenv_refuses_to_start(tmp_path: Path) -> None:
    result = serve_with_dotenv(
        tmp_path, {"ENTRABOT_BLOB_ENDPOINT": "http://127.0.0.1:1/devstoreaccount1"}
    )
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("entrabot-fleet: ") and "ENTRABOT_BLOB_CONTAINER" in line
    assert not (tmp_path / "data").exists()


# Every module of service/ that reads the environment, and why it may (service/config.py's docstring
# states the rule). A module that stops reading leaves this list too.
ENVIRONMENT_READERS = {
    "service/config.py": "the replica's one settings path: Settings (ENTRABOT_* and .env) and the "
    "pod name in HOSTNAME",
    "service/replica_build.py": "the test-only ENTRABOT_TEST_KILL_AT, never a setting",
    "service/devstack/dev_environment.py": "the local tooling's one reader: its ENTRABOT_AZURITE_* settings "
    "(and .env) and the environment of the replicas it launches",
    "service/devstack/local_state.py": "XDG_STATE_HOME, where `up` leaves its state for `say` (the "
    "XDG base-directory rule), never a setting",
    "service/bridge/cli_options.py": "the channel bridge, a separate program: its entry point hands its "
    "environment once, as a mapping, to service/bridge/config.py",
}
OS_READERS = {"environ", "environb", "getenv", "getenvb"}
SETTINGS_LIBRARIES = {
    "pydantic_settings",
    "dotenv",
}  # they read the environment (and .env files) themselves


def environment_reads(source: str) -> list[str]:
    """How a module reads the environment, one entry per place (empty: it does not)."""
    tree = ast.parse(source)
    os_names = {"os"} | {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "os" and alias.asname
    }
    reads: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in OS_READERS
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
        ):
            reads.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            reads += [
                f"line {node.lineno}: from os import {a.name}"
                for a in node.names
                if a.name in OS_READERS
            ]
        elif (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] in SETTINGS_LIBRARIES
        ):
            reads.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            reads += [
                f"line {node.lineno}: import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in SETTINGS_LIBRARIES
            ]
    return reads


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.environ['X']",
        "import os\nos.environ.get('X')",
        "import os\nvalues = dict(os.environ)",
        "import os\nos.getenv('X', 'default')",
        "import os as system\nsystem.environ.get('X')",
        "from os import environ\nenviron['X']",
        "from os import getenv as read\nread('X')",
        "from pydantic_settings import BaseSettings",
        "import dotenv",
        "def f():\n    import os\n    return os.environ",
    ],
)
def test_every_way_of_reading_the_environment_is_seen(source: str) -> None:
    assert environment_reads(source)


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.path.join('a', 'b')",
        "import os\nos.getpid()",
        "def load(environ):\n    return environ.get('X')",  # a mapping handed in is no read
        "from os import path\nenvironment = {}",
    ],
)
def test_what_is_not_an_environment_read_is_not_counted(source: str) -> None:
    assert environment_reads(source) == []


def test_the_environment_is_read_only_by_the_modules_allowed_to_read_it() -> None:
    readers = {
        path.relative_to(SERVICE.parent).as_posix(): reads
        for path in sorted(SERVICE.rglob("*.py"))
        if (reads := environment_reads(path.read_text(encoding="utf-8")))
    }
    assert {
        module: reads for module, reads in readers.items() if module not in ENVIRONMENT_READERS
    } == {}
    assert sorted(readers) == sorted(ENVIRONMENT_READERS)


def test_a_quiet_scan_interval_below_the_active_default_scans_at_it_throughout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENTRABOT_CHAT_SCAN_INTERVAL_S", "0.5")
    settings = load_settings()
    assert (settings.chat_scan_interval_s, settings.chat_scan_active_interval_s) == (0.5, 0.5)


def test_an_active_scan_slower_than_the_quiet_one_refuses_to_start(tmp_path: Path) -> None:
    result = serve_with_dotenv(
        tmp_path,
        {"ENTRABOT_CHAT_SCAN_INTERVAL_S": "2", "ENTRABOT_CHAT_SCAN_ACTIVE_INTERVAL_S": "5"},
    )
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert (
        "ENTRABOT_CHAT_SCAN_ACTIVE_INTERVAL_S (5.0 s) must be at most ENTRABOT_CHAT_SCAN_INTERVAL_S (2.0 s)"
        in line
    )
    assert "Value error" not in line
