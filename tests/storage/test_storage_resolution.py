"""Which backend the settings select (SPEC §3 "Resolution"); the settings are the only input."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from azure.storage.blob.aio import BlobServiceClient
from settings_env import settings_from_env

from service.config import SettingsError, load_settings
from service.devstack.azurite import Azurite
from service.from_settings.storage import storage_options
from service.storage.blob import BlobBackend
from service.storage.errors import BackendMisconfiguredError, BackendUnavailableError
from service.storage.local import LocalBackend
from service.storage.resolution import (
    BlobAuth,
    BlobChoice,
    LocalChoice,
    assert_backend_config,
    choose_backend,
    get_backend,
    local_process_lock_path,
)
from service.telemetry.metrics import StorageMetrics

AKS_ENDPOINT = "https://entrabotfleet.blob.core.windows.net"


def blob_env(azurite: Azurite, container: str) -> dict[str, str]:
    return {
        "ENTRABOT_BLOB_ENDPOINT": azurite.blob_endpoint,
        "ENTRABOT_BLOB_CONTAINER": container,
        "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
    }


async def container_exists(azurite: Azurite, container: str) -> bool:
    async with BlobServiceClient.from_connection_string(azurite.connection_string) as service:
        return container in [c.name async for c in service.list_containers()]


def test_no_blob_settings_resolve_to_local_under_the_data_dir(tmp_path: Path) -> None:
    backend = get_backend(
        storage_options(settings_from_env({"ENTRABOT_DATA_DIR": str(tmp_path / "data")})),
        metrics=StorageMetrics(),
    )
    assert isinstance(backend, LocalBackend)
    assert backend.root == tmp_path / "data"
    assert not (tmp_path / "data").exists()


def test_the_default_data_dir_is_dot_entrabot_data_in_home() -> None:
    assert choose_backend(storage_options(settings_from_env({}))) == LocalChoice(
        Path("~/.entrabot/data").expanduser()
    )


def test_blank_settings_count_as_unset(tmp_path: Path) -> None:
    env = {
        "ENTRABOT_BLOB_ENDPOINT": "",
        "ENTRABOT_BLOB_CONTAINER": "  ",
        "ENTRABOT_DATA_DIR": str(tmp_path),
    }
    assert choose_backend(storage_options(settings_from_env(env))) == LocalChoice(tmp_path)


def test_keep_local_wins_over_blob_settings(tmp_path: Path) -> None:
    env = {
        "ENTRABOT_KEEP_MEMORY_LOCAL": "true",
        "ENTRABOT_DATA_DIR": str(tmp_path),
        "ENTRABOT_BLOB_ENDPOINT": AKS_ENDPOINT,
        "ENTRABOT_BLOB_CONTAINER": "fleet",
    }
    assert choose_backend(storage_options(settings_from_env(env))) == LocalChoice(tmp_path)
    del env["ENTRABOT_BLOB_CONTAINER"]  # the escape hatch also covers a half configuration
    assert choose_backend(storage_options(settings_from_env(env))) == LocalChoice(tmp_path)


@pytest.mark.parametrize(
    ("name", "value"), [("ENTRABOT_KEEP_MEMORY_LOCAL", "maybe"), ("ENTRABOT_BLOB_AUTH", "password")]
)
def test_unparseable_storage_settings_are_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str
) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=f"^{name}: ") as raised:
        load_settings()
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("value", ["false", "0", "no", "off"])
def test_keep_local_false_leaves_the_blob_settings_in_charge(value: str) -> None:
    env = {
        "ENTRABOT_KEEP_MEMORY_LOCAL": value,
        "ENTRABOT_BLOB_ENDPOINT": AKS_ENDPOINT,
        "ENTRABOT_BLOB_CONTAINER": "fleet",
    }
    assert isinstance(choose_backend(storage_options(settings_from_env(env))), BlobChoice)


async def test_endpoint_without_container_fails_before_anything_is_created(
    azurite: Azurite, tmp_path: Path
) -> None:
    env = {
        "ENTRABOT_BLOB_ENDPOINT": azurite.blob_endpoint,
        "ENTRABOT_DATA_DIR": str(tmp_path / "data"),
    }
    message = (
        "ENTRABOT_BLOB_ENDPOINT is set but ENTRABOT_BLOB_CONTAINER is not; set both, "
        "or set ENTRABOT_KEEP_MEMORY_LOCAL=true"
    )
    with pytest.raises(BackendMisconfiguredError) as raised:
        get_backend(storage_options(settings_from_env(env)), metrics=StorageMetrics())
    assert str(raised.value) == message
    with pytest.raises(BackendMisconfiguredError):
        await assert_backend_config(
            storage_options(settings_from_env(env)), metrics=StorageMetrics()
        )
    assert not (tmp_path / "data").exists()


async def test_container_without_endpoint_fails_before_anything_is_created(
    azurite: Azurite, container_name: str, tmp_path: Path
) -> None:
    env = {
        "ENTRABOT_BLOB_CONTAINER": container_name,
        "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
        "ENTRABOT_DATA_DIR": str(tmp_path / "data"),
    }
    with pytest.raises(
        BackendMisconfiguredError,
        match="ENTRABOT_BLOB_CONTAINER is set but ENTRABOT_BLOB_ENDPOINT is not",
    ):
        await assert_backend_config(
            storage_options(settings_from_env(env)), metrics=StorageMetrics()
        )
    assert not await container_exists(azurite, container_name)
    assert not (tmp_path / "data").exists()


def test_a_connection_string_alone_is_a_half_configuration() -> None:
    with pytest.raises(
        BackendMisconfiguredError, match="ENTRABOT_BLOB_CONNECTION_STRING is set but"
    ):
        choose_backend(
            storage_options(
                settings_from_env({"ENTRABOT_BLOB_CONNECTION_STRING": "UseDevelopmentStorage=true"})
            )
        )


async def test_both_blob_settings_resolve_to_blob_and_create_no_container(
    azurite: Azurite, container_name: str
) -> None:
    backend = get_backend(
        storage_options(settings_from_env(blob_env(azurite, container_name))),
        metrics=StorageMetrics(),
    )
    try:
        assert isinstance(backend, BlobBackend)
        assert (
            backend.describe()
            == f"BlobBackend endpoint={azurite.blob_endpoint} container={container_name}"
        )
    finally:
        await backend.aclose()
    assert not await container_exists(azurite, container_name)


async def test_startup_check_reports_a_missing_container_and_does_not_create_it(
    azurite: Azurite, container_name: str
) -> None:
    with pytest.raises(
        BackendUnavailableError, match=f"container '{container_name}' does not exist at"
    ):
        await assert_backend_config(
            storage_options(settings_from_env(blob_env(azurite, container_name))),
            metrics=StorageMetrics(),
        )
    assert not await container_exists(azurite, container_name)


def test_resolution_reads_the_settings_and_not_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(
        "ENTRABOT_BLOB_ENDPOINT", AKS_ENDPOINT
    )  # a half configuration the settings do not carry
    monkeypatch.setenv("ENTRABOT_DATA_DIR", str(tmp_path / "environment"))
    backend = get_backend(
        storage_options(settings_from_env({"ENTRABOT_DATA_DIR": str(tmp_path / "settings")})),
        metrics=StorageMetrics(),
    )
    assert isinstance(backend, LocalBackend) and backend.root == tmp_path / "settings"


def test_connection_string_auth_is_chosen_when_one_is_given() -> None:
    env = {
        "ENTRABOT_BLOB_ENDPOINT": "http://127.0.0.1:10000/devstoreaccount1",
        "ENTRABOT_BLOB_CONTAINER": "fleet",
        "ENTRABOT_BLOB_CONNECTION_STRING": "UseDevelopmentStorage=true",
    }
    assert choose_backend(storage_options(settings_from_env(env))) == BlobChoice(
        "http://127.0.0.1:10000/devstoreaccount1",
        "fleet",
        BlobAuth.CONNECTION_STRING,
        "UseDevelopmentStorage=true",
    )


async def test_without_a_connection_string_the_workload_identity_is_used() -> None:
    env = {"ENTRABOT_BLOB_ENDPOINT": AKS_ENDPOINT, "ENTRABOT_BLOB_CONTAINER": "fleet"}
    assert choose_backend(storage_options(settings_from_env(env))) == BlobChoice(
        AKS_ENDPOINT, "fleet", BlobAuth.DEFAULT_CREDENTIAL
    )
    backend = get_backend(storage_options(settings_from_env(env)), metrics=StorageMetrics())
    try:
        assert isinstance(backend, BlobBackend)
        assert backend.describe() == f"BlobBackend endpoint={AKS_ENDPOINT} container=fleet"
    finally:
        await backend.aclose()


async def test_agent_user_auth_uses_the_token_provider_passed_in() -> None:
    env = {
        "ENTRABOT_BLOB_ENDPOINT": AKS_ENDPOINT,
        "ENTRABOT_BLOB_CONTAINER": "fleet",
        "ENTRABOT_BLOB_AUTH": "agent_user",
    }

    async def provider() -> tuple[str, float]:
        return "token", 0.0

    with pytest.raises(BackendMisconfiguredError, match="no agent-user storage token provider"):
        get_backend(storage_options(settings_from_env(env)), metrics=StorageMetrics())
    backend = get_backend(
        storage_options(settings_from_env(env)),
        storage_token_provider=provider,
        metrics=StorageMetrics(),
    )
    try:
        assert isinstance(backend, BlobBackend)
    finally:
        await backend.aclose()


def test_an_explicit_auth_mode_wins_over_a_connection_string() -> None:
    env = {
        "ENTRABOT_BLOB_ENDPOINT": AKS_ENDPOINT,
        "ENTRABOT_BLOB_CONTAINER": "fleet",
        "ENTRABOT_BLOB_CONNECTION_STRING": "UseDevelopmentStorage=true",
        "ENTRABOT_BLOB_AUTH": "default_credential",
    }
    assert choose_backend(storage_options(settings_from_env(env))) == BlobChoice(
        AKS_ENDPOINT, "fleet", BlobAuth.DEFAULT_CREDENTIAL
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"ENTRABOT_BLOB_AUTH": "connection_string"}, "ENTRABOT_BLOB_CONNECTION_STRING is not set"),
        ({"ENTRABOT_BLOB_CONTAINER": "Fleet_State"}, "is not a valid container name"),
        ({"ENTRABOT_BLOB_CONTAINER": "ab"}, "is not a valid container name"),
        ({"ENTRABOT_BLOB_ENDPOINT": "not a url"}, "is not an http\\(s\\) URL"),
        ({"ENTRABOT_BLOB_ENDPOINT": "https://acct.blob.core.windows.net:port"}, "is not a URL"),
        (
            {"ENTRABOT_BLOB_ENDPOINT": "http://acct.blob.core.windows.net"},
            "token authentication needs https",
        ),
    ],
)
def test_unusable_blob_settings_are_misconfigured(overrides: dict[str, str], message: str) -> None:
    env = {"ENTRABOT_BLOB_ENDPOINT": AKS_ENDPOINT, "ENTRABOT_BLOB_CONTAINER": "fleet", **overrides}
    with pytest.raises(BackendMisconfiguredError, match=message):
        get_backend(storage_options(settings_from_env(env)), metrics=StorageMetrics())


def test_an_endpoint_carrying_a_sas_is_refused_without_echoing_it() -> None:
    env = {
        "ENTRABOT_BLOB_ENDPOINT": AKS_ENDPOINT + "/?sv=2024&sig=TOPSECRET",
        "ENTRABOT_BLOB_CONTAINER": "fleet",
    }
    with pytest.raises(BackendMisconfiguredError, match="without a query string") as raised:
        get_backend(storage_options(settings_from_env(env)), metrics=StorageMetrics())
    assert "TOPSECRET" not in str(raised.value)


def test_a_malformed_connection_string_is_misconfigured() -> None:
    env = {
        "ENTRABOT_BLOB_ENDPOINT": "http://127.0.0.1:10000/devstoreaccount1",
        "ENTRABOT_BLOB_CONTAINER": "fleet",
        "ENTRABOT_BLOB_CONNECTION_STRING": "AccountKey-is-TOPSECRET-but-no-separators",
    }
    with pytest.raises(
        BackendMisconfiguredError, match="ENTRABOT_BLOB_CONNECTION_STRING is malformed"
    ) as raised:
        get_backend(storage_options(settings_from_env(env)), metrics=StorageMetrics())
    assert "TOPSECRET" not in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_the_connection_string_and_the_endpoint_must_name_the_same_place(azurite: Azurite) -> None:
    env = {
        "ENTRABOT_BLOB_ENDPOINT": "http://127.0.0.1:1/devstoreaccount1",
        "ENTRABOT_BLOB_CONTAINER": "fleet",
        "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
    }
    with pytest.raises(BackendMisconfiguredError, match="make them name the same endpoint"):
        get_backend(storage_options(settings_from_env(env)), metrics=StorageMetrics())


async def test_startup_check_logs_one_line_naming_the_local_root(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("test.storage.startup")
    with caplog.at_level(logging.INFO, logger=logger.name):
        backend = await assert_backend_config(
            storage_options(settings_from_env({"ENTRABOT_DATA_DIR": str(tmp_path / "data")})),
            logger=logger,
            metrics=StorageMetrics(),
        )
    assert isinstance(backend, LocalBackend)
    assert [r.getMessage() for r in caplog.records] == [
        f"storage backend: LocalBackend root={tmp_path / 'data'}"
    ]


async def test_startup_check_logs_one_line_naming_endpoint_and_container_but_no_key(
    azurite: Azurite, container_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    env = blob_env(azurite, container_name)
    setup = get_backend(storage_options(settings_from_env(env)), metrics=StorageMetrics())
    assert isinstance(setup, BlobBackend)
    await setup.ensure_container()
    await setup.aclose()
    logger = logging.getLogger("test.storage.startup")
    with caplog.at_level(logging.INFO, logger=logger.name):
        backend = await assert_backend_config(
            storage_options(settings_from_env(env)), logger=logger, metrics=StorageMetrics()
        )
    await backend.aclose()
    assert [r.getMessage() for r in caplog.records] == [
        f"storage backend: BlobBackend endpoint={azurite.blob_endpoint} container={container_name}"
    ]


async def test_the_process_lock_stays_local_and_is_not_a_key(tmp_path: Path) -> None:
    env = {
        "ENTRABOT_DATA_DIR": str(tmp_path),
        "ENTRABOT_BLOB_ENDPOINT": AKS_ENDPOINT,
        "ENTRABOT_BLOB_CONTAINER": "c1",
    }
    lock = local_process_lock_path(storage_options(settings_from_env(env)))
    assert lock == tmp_path / ".singleton.lock"
    lock.write_text("1234")
    local = LocalBackend(tmp_path)
    await local.write_text("watched_chats", "a\n")
    assert await local.list() == ["watched_chats"]


async def test_describe_never_shows_a_sas_from_the_connection_string() -> None:
    backend = BlobBackend.from_connection_string(
        "BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=2024&sig=TOPSECRET",
        "fleet",
        metrics=StorageMetrics(),
    )
    try:
        assert (
            backend.describe()
            == "BlobBackend endpoint=https://acct.blob.core.windows.net container=fleet"
        )
    finally:
        await backend.aclose()
