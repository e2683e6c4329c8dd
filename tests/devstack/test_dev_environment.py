"""The local tooling reads its environment in one place, ``.env`` included, and the replicas it
launches see only the settings it gives them."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.seed import build_seed
from service.devstack.azurite import Azurite, AzuriteError, start_azurite
from service.devstack.dev_environment import DevstackSettingsError
from service.devstack.fleet import LocalFleet

DEVSTACK_NAMES = (
    "ENTRABOT_AZURITE",
    "ENTRABOT_AZURITE_DIR",
    "ENTRABOT_AZURITE_IMAGE",
    "ENTRABOT_AZURITE_NO_DOCKER",
)


@pytest.fixture
def in_a_directory_with_a_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in DEVSTACK_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / ".env"


def test_an_azurite_directory_set_only_in_dotenv_is_the_one_used(
    in_a_directory_with_a_dotenv: Path,
) -> None:
    elsewhere = in_a_directory_with_a_dotenv.parent / "elsewhere"
    in_a_directory_with_a_dotenv.write_text(f"ENTRABOT_AZURITE_DIR={elsewhere}\n")
    with pytest.raises(AzuriteError, match=f"run `npm ci` in {elsewhere} "):
        start_azurite().stop()  # started from anywhere else, it would not be this error


def test_a_devstack_setting_that_cannot_be_parsed_is_named(
    in_a_directory_with_a_dotenv: Path,
) -> None:
    in_a_directory_with_a_dotenv.write_text("ENTRABOT_AZURITE=docker\n")
    with pytest.raises(
        DevstackSettingsError, match=r"^ENTRABOT_AZURITE: .*'npm' or 'testcontainers'"
    ):
        start_azurite()


@pytest.mark.parametrize("value", ["true", "false"])
def test_the_retired_no_docker_setting_is_refused_naming_the_switch(
    in_a_directory_with_a_dotenv: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ENTRABOT_AZURITE_NO_DOCKER", value)
    with pytest.raises(
        DevstackSettingsError,
        match=r"^ENTRABOT_AZURITE_NO_DOCKER: .*ENTRABOT_AZURITE=testcontainers",
    ):
        start_azurite()


def test_testcontainers_without_an_answering_engine_says_so_and_how_to_fall_back(
    in_a_directory_with_a_dotenv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_a_directory_with_a_dotenv.write_text("ENTRABOT_AZURITE=testcontainers\n")
    monkeypatch.setenv(
        "DOCKER_HOST", f"unix://{in_a_directory_with_a_dotenv.parent / 'no-engine.sock'}"
    )
    with pytest.raises(
        AzuriteError, match=r"no Docker engine answers .*unset ENTRABOT_AZURITE for the npm build"
    ):
        start_azurite()


@pytest.mark.slow
@pytest.mark.azurite
def test_a_local_fleet_replica_reads_neither_the_callers_settings_nor_a_dotenv_where_it_was_started(
    azurite: Azurite, in_a_directory_with_a_dotenv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Either value would stop the replica at start-up ("must be a positive number of seconds").
    in_a_directory_with_a_dotenv.write_text("ENTRABOT_CHAT_POLL_INTERVAL_S=0\n")
    monkeypatch.setenv("ENTRABOT_EMAIL_POLL_INTERVAL_S", "0")
    fleet = LocalFleet(
        build_seed(chats=1),
        in_a_directory_with_a_dotenv.parent / "fleet",
        replicas=1,
        azurite=azurite,
    )
    try:
        fleet.start()  # raises with the replica's log when it exits during start-up
        [replica] = fleet.members
        assert replica.alive
    finally:
        fleet.stop()
