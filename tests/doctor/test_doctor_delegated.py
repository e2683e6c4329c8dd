"""`entrabot-fleet doctor` in delegated mode, as an operator runs it: a process against the emulator over
HTTP and an Azurite container into which Ada signed in by device code (or nobody did)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sign_in_kit import delegated_seed, delegated_settings, new_token_key, sign_in_as

from emulator.seed import DEFAULT_DELEGATED_SCOPES, Seed
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite
from service.devstack.emulator_env import delegated_env
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics
from tests.doctor.test_doctor_cli import blob_env, container, doctor, failures, lines  # noqa: F401 - container: a fixture

pytestmark = pytest.mark.azurite


def tenant(*, withhold: str | None = None) -> Seed:
    """Ada's tenant; ``withhold``: a permission the public client app was never consented."""
    data = delegated_seed(chats=2, humans=3, history=2).model_dump()
    for app in data["apps"]:
        app["delegated_scopes"] = [s for s in DEFAULT_DELEGATED_SCOPES if s != withhold]
    return Seed.model_validate(data)


@pytest.fixture(scope="module")
def healthy() -> Iterator[RunningEmulator]:
    with start_emulator(tenant()) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def without_mail() -> Iterator[RunningEmulator]:
    with start_emulator(tenant(withhold="Mail.ReadWrite")) as emulator:
        yield emulator


async def signed_in(emulator: RunningEmulator, azurite: Azurite, container: str) -> dict[str, str]:
    """The environment of a fleet whose container holds Ada's sign-in."""
    key = new_token_key()
    store = BlobBackend.from_connection_string(
        azurite.connection_string, container, metrics=StorageMetrics()
    )
    try:
        await sign_in_as(
            emulator,
            delegated_settings(emulator, key),
            store,
            emulator.seed.humans[0].user_principal_name,
        )
    finally:
        await store.aclose()
    return {
        **delegated_env(emulator.seed, base_url=emulator.base_url, token_key=key),
        **blob_env(azurite, container),
    }


async def test_a_signed_in_fleet_passes_every_check(
    healthy: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    result = doctor(await signed_in(healthy, azurite, container), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    found = lines(result)
    for check in (
        "delegated settings",
        "sign-in record",
        "signed-in token (Graph)",
        "storage read/write/CAS",
        "graph Mail.Read (GET /me/mailFolders/inbox/messages)",
        "graph ChatMessage.Send (the token's scp claim)",
    ):
        assert found[check] == "ok", result.stdout
    assert found["sponsor read"] == "skip"
    ada = healthy.seed.humans[0]
    assert f"{ada.display_name} ({ada.user_principal_name}) signed in" in result.stdout
    assert "eyJ" not in result.stdout + result.stderr  # no token, access or id, is ever printed


async def test_nobody_signed_in_fails_the_record_line_naming_the_command(
    healthy: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    env = {
        **delegated_env(healthy.seed, base_url=healthy.base_url, token_key=new_token_key()),
        **blob_env(azurite, container),
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1
    [line] = failures(result)
    assert line.startswith("FAIL sign-in record:") and "entrabot-fleet signin" in line, (
        result.stdout
    )
    assert lines(result)["graph Mail.Read (GET /me/mailFolders/inbox/messages)"] == "skip"


async def test_another_key_fails_the_record_line_naming_the_key_setting(
    healthy: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    env = {
        **await signed_in(healthy, azurite, container),
        "ENTRABOT_DELEGATED_TOKEN_KEY": new_token_key(),
    }
    result = doctor(env, tmp_path)
    [line] = failures(result)
    assert result.returncode == 1 and line.startswith("FAIL sign-in record:")
    assert "ENTRABOT_DELEGATED_TOKEN_KEY" in line, result.stdout


async def test_a_permission_the_app_lacks_fails_its_line_naming_the_app_and_the_person(
    without_mail: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    result = doctor(await signed_in(without_mail, azurite, container), tmp_path)
    assert result.returncode == 1
    [line] = failures(result)
    assert line.startswith("FAIL graph Mail.Read (GET /me/mailFolders/inbox/messages):"), (
        result.stdout
    )
    seed = without_mail.seed
    assert f"to the app registration {seed.public_client.app_id}" in line
    assert seed.humans[0].user_principal_name in line and "agent identity" not in line


@pytest.mark.parametrize(
    "change, named",
    [
        ({"ENTRABOT_DELEGATED_CLIENT_ID": ""}, "ENTRABOT_DELEGATED_CLIENT_ID"),
        ({"ENTRABOT_BLOB_AUTH": "agent_user"}, "ENTRABOT_BLOB_AUTH"),
    ],
)
def test_a_setting_delegated_mode_cannot_work_without_fails_its_line(
    change: dict[str, str],
    named: str,
    healthy: RunningEmulator,
    azurite: Azurite,
    container: str,
    tmp_path: Path,
) -> None:
    env = {
        **delegated_env(healthy.seed, base_url=healthy.base_url, token_key=new_token_key()),
        **blob_env(azurite, container),
        **change,
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1
    assert any(
        line.startswith("FAIL delegated settings:") and named in line for line in failures(result)
    ), result.stdout


def test_a_key_that_is_not_32_bytes_fails_the_settings_line_without_showing_it(
    healthy: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    secret = "not-a-key-but-a-secret-value"
    env = {
        **delegated_env(healthy.seed, base_url=healthy.base_url, token_key=secret),
        **blob_env(azurite, container),
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1
    [line] = failures(result)
    assert "openssl rand -base64 32" in line and secret not in result.stdout + result.stderr
