"""``entrabot-fleet doctor`` as an operator runs it: a real process against the emulator and Azurite."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.seed import DEFAULT_DELEGATED_SCOPES, SPONSOR_READ_ROLES, Seed, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite
from service.devstack.emulator_env import agent_user_env
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics

pytestmark = pytest.mark.azurite

# The sponsor read is app-only (Graph's "List agentIdentity sponsors" has no delegated permission).
SPONSOR_READ_ROLE = SPONSOR_READ_ROLES[0]  # AgentIdentity.ReadWrite.All, as the emulator enforces


def tenant(*, withhold: str | None = None, sponsored: bool = True) -> Seed:
    """The demo-shaped tenant, its agent identity granted the sponsor read; ``withhold`` one permission;
    ``sponsored=False``: the agent identity has nobody as sponsor."""
    base = build_seed(chats=2, humans=3, history=2)
    scopes = [s for s in DEFAULT_DELEGATED_SCOPES if s != withhold]
    data = base.model_dump()
    for identity in data["agent_identities"]:
        identity["app_roles"] = [r for r in [SPONSOR_READ_ROLE] if r != withhold]
        identity["delegated_scopes"] = scopes
        if not sponsored:
            identity["sponsors"] = []
    for app in data["apps"]:
        app["delegated_scopes"] = scopes
    return Seed.model_validate(data)


@pytest.fixture(scope="module")
def healthy() -> Iterator[RunningEmulator]:
    with start_emulator(tenant()) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def without_mail() -> Iterator[RunningEmulator]:
    with start_emulator(tenant(withhold="Mail.ReadWrite")) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def without_sponsor_read() -> Iterator[RunningEmulator]:
    with start_emulator(tenant(withhold=SPONSOR_READ_ROLE)) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def without_mail_send() -> Iterator[RunningEmulator]:
    # Mail.Send is the one write no broader granted scope covers (ChatMessage.Send is covered by
    # Chat.ReadWrite), so withholding it leaves exactly one write missing from the token.
    with start_emulator(tenant(withhold="Mail.Send")) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def without_sponsors() -> Iterator[RunningEmulator]:
    with start_emulator(tenant(sponsored=False)) as emulator:
        yield emulator


@pytest.fixture
async def container(azurite: Azurite, container_name: str) -> str:
    backend = BlobBackend.from_connection_string(
        azurite.connection_string, container_name, metrics=StorageMetrics()
    )
    await backend.ensure_container()
    await backend.aclose()
    return container_name


def doctor(env: dict[str, str], cwd: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "doctor", *flags],
        env={**clean, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def blob_env(azurite: Azurite, container: str) -> dict[str, str]:
    return {
        "ENTRABOT_BLOB_ENDPOINT": azurite.blob_endpoint,
        "ENTRABOT_BLOB_CONTAINER": container,
        "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
    }


def failures(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("FAIL")]


def lines(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Check name → status, from the report's ``STATUS check: detail`` lines."""
    found = {}
    for line in result.stdout.splitlines():
        status, _, rest = line.partition(" ")
        if status in ("ok", "FAIL", "skip"):
            found[rest.strip().split(":", 1)[0]] = status
    return found


def test_a_healthy_tenant_and_container_pass_every_check(
    healthy: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    env = {
        **agent_user_env(healthy.seed, base_url=healthy.base_url),
        **blob_env(azurite, container),
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    found = lines(result)
    assert set(found.values()) <= {"ok", "skip"}, result.stdout
    for check in (
        "identity hop 1 (blueprint)",
        "identity hop 2 (agent identity)",
        "identity hop 3 (agent user, Graph)",
        "graph Mail.Read (GET /me/mailFolders/inbox/messages)",
        "graph Mail.Send (the token's scp claim)",
        "graph User.ReadBasic.All (GET /users/{id})",
        "storage read/write/CAS",
        "mcp auth settings",
    ):
        assert found[check] == "ok", result.stdout
    assert found["sponsor read (agent identity app-only, AgentIdentity.ReadWrite.All)"] == "ok"
    assert "all" in result.stdout.splitlines()[-1]


def test_a_withheld_permission_fails_its_own_line_and_the_exit_code(
    without_mail: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    env = {
        **agent_user_env(without_mail.seed, base_url=without_mail.base_url),
        **blob_env(azurite, container),
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    failed = {check for check, status in lines(result).items() if status == "FAIL"}
    assert failed == {"graph Mail.Read (GET /me/mailFolders/inbox/messages)"}, result.stdout
    [line] = [x for x in result.stdout.splitlines() if x.startswith("FAIL")]
    assert "grant the delegated permission Mail.Read" in line
    # docs/azure.md §2: delegated permissions are granted to the agent identity (the token's client),
    # for the agent user (consentType Principal), not to the blueprint.
    seed = without_mail.seed
    assert (
        f"to the agent identity {seed.agent_identity.id} for the agent user "
        f"{seed.agent_user.user_principal_name}" in line
    )
    assert "blueprint" not in line


def test_a_withheld_application_permission_fails_the_sponsor_read(
    without_sponsor_read: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    env = {
        **agent_user_env(without_sponsor_read.seed, base_url=without_sponsor_read.base_url),
        **blob_env(azurite, container),
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith("FAIL sponsor read"), result.stdout
    assert "grant the application permission" in failed[0]
    # Application permissions go to the agent identity's own service principal (its app-only token).
    assert (
        f"to the agent identity {without_sponsor_read.seed.agent_identity.id} itself" in failed[0]
    )
    assert "blueprint" not in failed[0]


def test_a_write_permission_missing_from_the_token_fails_its_line(
    without_mail_send: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    seed = without_mail_send.seed
    env = {
        **agent_user_env(seed, base_url=without_mail_send.base_url),
        **blob_env(azurite, container),
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = failures(result)
    assert line.startswith("FAIL graph Mail.Send (the token's scp claim):"), result.stdout
    assert "lacks Mail.Send" in line
    assert (
        f"to the agent identity {seed.agent_identity.id} for the agent user {seed.agent_user.user_principal_name}"
        in line
    )


def test_an_agent_identity_without_sponsors_fails_the_sponsor_read(
    without_sponsors: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    env = {
        **agent_user_env(without_sponsors.seed, base_url=without_sponsors.base_url),
        **blob_env(azurite, container),
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = failures(result)
    assert line.startswith("FAIL sponsor read"), result.stdout
    assert "no sponsors" in line
    # The delegated reads still run: User.ReadBasic.All falls back to another member of a chat.
    assert lines(result)["graph User.ReadBasic.All (GET /users/{id})"] == "ok", result.stdout


@pytest.mark.parametrize(
    "auth",
    [
        pytest.param(
            {"ENTRABOT_MCP_JWT_AUDIENCE": "api://entrabot-fleet"},
            id="jwt-audience-without-required-roles",
        ),
        pytest.param({"ENTRABOT_HOST": "0.0.0.0"}, id="no-auth-off-loopback"),
    ],
)
def test_unsafe_mcp_auth_settings_fail_their_line(
    auth: dict[str, str], healthy: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    env = {
        **agent_user_env(healthy.seed, base_url=healthy.base_url),
        **blob_env(azurite, container),
        **auth,
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = failures(result)
    assert line.startswith("FAIL mcp auth settings:"), result.stdout
    # The line names the setting to fix.
    assert (
        "ENTRABOT_MCP_JWT_REQUIRED_ROLES"
        if "ENTRABOT_MCP_JWT_AUDIENCE" in auth
        else "ENTRABOT_HOST"
    ) in line


def test_an_agent_user_id_that_is_not_the_identitys_agent_user_fails_hop_three(
    healthy: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    # An operator's slip: the sponsor's object id where the agent user's belongs. Hops 1 and 2 (the
    # blueprint and the agent identity) still work, so the app-only sponsor read does too.
    sponsor = healthy.seed.humans[0]
    env = {
        **agent_user_env(healthy.seed, base_url=healthy.base_url),
        **blob_env(azurite, container),
        "ENTRABOT_AGENT_USER_ID": sponsor.id,
        "ENTRABOT_AGENT_USER_UPN": sponsor.user_principal_name,
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    found = lines(result)
    assert (
        found["identity hop 1 (blueprint)"] == "ok"
        and found["identity hop 2 (agent identity)"] == "ok"
    )
    [line] = failures(result)
    assert line.startswith("FAIL identity hop 3 (agent user, Graph):"), result.stdout
    assert found["graph Mail.Read (GET /me/mailFolders/inbox/messages)"] == "skip"
    assert found["sponsor read (agent identity app-only, AgentIdentity.ReadWrite.All)"] == "ok"


def test_a_wrong_blueprint_secret_fails_hop_one_and_skips_what_needs_it(
    healthy: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    env = {
        **agent_user_env(healthy.seed, base_url=healthy.base_url),
        **blob_env(azurite, container),
        "ENTRABOT_BLUEPRINT_CLIENT_SECRET": "not-the-secret",
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1
    found = lines(result)
    assert found["identity hop 1 (blueprint)"] == "FAIL"
    assert found["identity hop 2 (agent identity)"] == "skip"
    assert found["graph Mail.Read (GET /me/mailFolders/inbox/messages)"] == "skip"
    assert found["storage read/write/CAS"] == "ok"  # storage does not depend on the identity here
    [hop1] = [x for x in result.stdout.splitlines() if x.startswith("FAIL identity hop 1")]
    assert "AADSTS7000215" in hop1 and "not-the-secret" not in result.stdout + result.stderr
    # Entra's words are cut where a sentence ends, never inside a bracket or a quote.
    for opening, closing in ("()", "[]"):
        assert hop1.count(opening) == hop1.count(closing), hop1
    # Said once: the app-only sponsor read needs the same hop, and no log line repeats it on stderr.
    assert found["sponsor read (agent identity app-only, AgentIdentity.ReadWrite.All)"] == "skip"
    assert [x for x in result.stdout.splitlines() if "AADSTS7000215" in x] == [hop1]
    assert result.stderr == ""


def test_an_unreachable_container_fails_the_storage_line(
    healthy: RunningEmulator, tmp_path: Path
) -> None:
    endpoint = "http://127.0.0.1:1/devstoreaccount1"
    connection = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDX"
        f"J1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint={endpoint};"
    )
    env = {
        **agent_user_env(healthy.seed, base_url=healthy.base_url),
        "ENTRABOT_BLOB_ENDPOINT": endpoint,
        "ENTRABOT_BLOB_CONTAINER": "fleet",
        "ENTRABOT_BLOB_CONNECTION_STRING": connection,
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1
    found = lines(result)
    assert found["storage reachable"] == "FAIL"
    assert {c for c, s in found.items() if s == "FAIL"} == {"storage reachable"}, result.stdout
    [line] = [x for x in result.stdout.splitlines() if x.startswith("FAIL storage reachable")]
    assert "ENTRABOT_BLOB_ENDPOINT" in line


def test_an_unreachable_notification_url_fails_its_line(
    healthy: RunningEmulator, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    env = {
        **agent_user_env(healthy.seed, base_url=healthy.base_url),
        **blob_env(azurite, container),
        "ENTRABOT_NOTIFICATION_URL": "http://127.0.0.1:1/notify",
        "ENTRABOT_NOTIFICATION_CLIENT_STATE": "s3cret-state",
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1
    assert lines(result)["notification url"] == "FAIL"


def test_a_local_data_dir_passes_the_cas_check_although_its_etags_are_content_hashes(
    healthy: RunningEmulator, tmp_path: Path
) -> None:
    env = {
        **agent_user_env(healthy.seed, base_url=healthy.base_url),
        "ENTRABOT_DATA_DIR": str(tmp_path / "data"),
    }
    result = doctor(env, tmp_path)
    assert lines(result)["storage read/write/CAS"] == "ok", result.stdout
    assert result.returncode == 0, result.stdout


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released: connecting is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_graph_url_where_nothing_listens_is_one_line_naming_it_and_the_graph_checks_are_skipped(
    healthy: RunningEmulator, tmp_path: Path
) -> None:
    closed = f"http://127.0.0.1:{closed_port()}/v1.0"
    env = {
        **agent_user_env(healthy.seed, base_url=healthy.base_url),
        "ENTRABOT_GRAPH_URL": closed,
        "ENTRABOT_DATA_DIR": str(tmp_path / "data"),
    }
    result = doctor(env, tmp_path)
    assert result.returncode == 1, result.stdout
    [line] = failures(result)
    assert line.startswith("FAIL graph reachable: ENTRABOT_GRAPH_URL=" + closed), line
    assert result.stdout.count(closed) == 1 and "GraphConnectionError" not in result.stdout
    found = lines(result)
    graph_checks = [
        c for c in found if c.startswith(("graph ", "sponsor read")) and c != "graph reachable"
    ]
    assert len(graph_checks) > 5  # every permission, the scp-claim ones included, and the sponsors
    assert {found[c] for c in graph_checks} == {"skip"}, result.stdout
    assert found["identity hop 3 (agent user, Graph)"] == "ok"  # Entra is elsewhere and answers
    assert found["storage read/write/CAS"] == "ok"
    assert result.stderr == ""


def test_a_missing_container_is_refused_naming_the_flag_and_created_with_it(
    healthy: RunningEmulator, azurite: Azurite, missing_container: str, tmp_path: Path
) -> None:
    env = {
        **agent_user_env(healthy.seed, base_url=healthy.base_url),
        **blob_env(azurite, missing_container),
    }
    refused = doctor(env, tmp_path)
    assert refused.returncode == 1
    [line] = failures(refused)
    assert line.startswith("FAIL storage reachable:") and "--create-container" in line, line
    assert lines(refused)["storage read/write/CAS"] == "skip"

    created = doctor(env, tmp_path, "--create-container")
    assert created.returncode == 0, created.stdout
    found = lines(created)
    assert found["storage container (--create-container)"] == "ok"
    assert "created" in created.stdout and found["storage read/write/CAS"] == "ok"

    again = doctor(env, tmp_path)  # it stays: the next run, without the flag, finds it
    assert again.returncode == 0, again.stdout
