"""The ``entrabot-fleet`` console script, run as a subprocess with its configuration in the environment."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from service.storage.blob import BlobBackend
from service.storage.claude_code_memory import plain_slug
from service.telemetry.metrics import StorageMetrics

CONSOLE_SCRIPT = Path(sys.executable).with_name("entrabot-fleet")
Result = subprocess.CompletedProcess[str]
Run = Callable[..., Result]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fresh HOME, so the default ~/.claude/memory and ~/.entrabot/data are the test's own."""
    directory = tmp_path / "home"
    directory.mkdir()
    return directory


@pytest.fixture
def cli(home: Path, tmp_path: Path) -> Run:
    """Run the console script with only the given ENTRABOT_* settings (cwd without a .env)."""

    def run(*args: str, env: dict[str, str] | None = None, module: bool = False) -> Result:
        # Only the settings a test names: a developer's own ENTRABOT_* must not leak into a case.
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
        clean.update(HOME=str(home), **(env or {}))
        command = [sys.executable, "-m", "service.cli"] if module else [str(CONSOLE_SCRIPT)]
        return subprocess.run(
            [*command, *args], env=clean, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    return run


@pytest.fixture
def azurite_like_connection() -> Callable[[int], tuple[str, str]]:
    from service.devstack.azurite import ACCOUNT, ACCOUNT_KEY

    def build(port: int) -> tuple[str, str]:
        endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={endpoint};",
            endpoint,
        )

    return build


def claude_memory_of(home: Path, project: Path) -> Path:
    return home / ".claude" / "projects" / plain_slug(project.resolve()) / "memory"


def local_env(store: Path) -> dict[str, str]:
    return {"ENTRABOT_KEEP_MEMORY_LOCAL": "true", "ENTRABOT_DATA_DIR": str(store)}


def stored(snapshot: Callable[[Path], dict[str, bytes]], store: Path) -> dict[str, bytes]:
    """The keys a LocalBackend holds, without its lock and temp housekeeping."""
    housekeeping = (".locks/", ".tmp/")
    return {rel: data for rel, data in snapshot(store).items() if not rel.startswith(housekeeping)}


def blob_env(connection_string: str, endpoint: str, container: str) -> dict[str, str]:
    return {
        "ENTRABOT_BLOB_ENDPOINT": endpoint,
        "ENTRABOT_BLOB_CONTAINER": container,
        "ENTRABOT_BLOB_CONNECTION_STRING": connection_string,
    }


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def assert_one_config_line(result: subprocess.CompletedProcess[str], *names: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("entrabot-fleet: "), result.stderr
    assert "Traceback" not in result.stderr
    assert all(name in lines[0] for name in names), lines[0]
    assert result.stdout == ""


def test_help_describes_the_tool_and_each_command(cli):
    result = cli("--help", module=True)

    assert result.returncode == 0
    assert "Entrabot Fleet" in result.stdout
    assert "migrate " in result.stdout and "persona " in result.stdout


def test_migrate_copies_into_the_local_backend_and_exits_zero(cli, tmp_path, write_tree, snapshot):
    source, store = tmp_path / "src", tmp_path / "store"
    write_tree(source, {"promises.jsonl": "p\n", "watched_chats": "19:a\n", "notes/a.md": "a"})

    result = cli("migrate", "--source", str(source), env=local_env(store))

    assert result.returncode == 0, result.stderr
    assert "copied 2," in result.stdout and "excluded 1," in result.stdout
    assert stored(snapshot, store) == {"promises.jsonl": b"p\n", "notes/a.md": b"a"}


@pytest.mark.azurite
async def test_migrate_default_sources_land_in_azurite(
    cli, home, tmp_path, azurite, container_name, write_tree
):
    data = tmp_path / "data"
    write_tree(data, {"promises.jsonl": "p\n", "chat_cursors/x.json": "{}"})
    # The working directory's auto memory, where Claude Code keeps it (tests/storage_migration/
    # test_claude_code_memory.py); the ~/.claude/memory an earlier version read is not it.
    write_tree(
        claude_memory_of(home, tmp_path),
        {"profile.md": "me", "chat_cursors/x.json": "persona note"},
    )
    write_tree(home / ".claude" / "memory", {"not-claude-codes.md": "left alone"})
    blob = BlobBackend.from_connection_string(
        azurite.connection_string, container_name, metrics=StorageMetrics()
    )
    try:
        await blob.ensure_container()
        env = blob_env(azurite.connection_string, azurite.blob_endpoint, container_name)
        env["ENTRABOT_DATA_DIR"] = str(data)

        first, second = cli("migrate", env=env), cli("migrate", env=env)

        assert first.returncode == 0, first.stderr
        assert (
            f"persona memory: {claude_memory_of(home, tmp_path)}, Claude Code's directory"
            in first.stdout
        )
        assert await blob.list() == [
            "claude_memory/chat_cursors/x.json",  # under a prefix, poll-state names are content
            "claude_memory/profile.md",
            "promises.jsonl",
        ]
        assert second.returncode == 0 and "copied 0, skipped 3" in second.stdout
    finally:
        await blob.aclose()


def test_migrate_with_an_unreadable_file_exits_one_and_names_it(
    cli, tmp_path, write_tree, snapshot
):
    source, store = tmp_path / "src", tmp_path / "store"
    write_tree(source, {"a.md": "a", "photo.png": b"\x89PNG\r\n\x1a\n\xff"})

    result = cli("migrate", "--quiet", "--source", str(source), env=local_env(store))

    assert result.returncode == 1
    assert "error: photo.png: photo.png is not UTF-8 text" in result.stderr
    assert "copied 1," in result.stdout and "errors 1" in result.stdout
    assert stored(snapshot, store) == {"a.md": b"a"}


def test_migrate_dry_run_writes_nothing(cli, tmp_path, write_tree):
    source, store = tmp_path / "src", tmp_path / "store"
    write_tree(source, {"a.md": "a"})

    result = cli(
        "migrate", "--dry-run", "--source", f"{source}:claude_memory", env=local_env(store)
    )

    assert result.returncode == 0, result.stderr
    assert "would copy 1," in result.stdout
    assert not (store / "claude_memory").exists()


def test_migrate_without_blob_settings_refuses_to_copy_the_data_directory_into_itself(
    cli, home, write_tree, snapshot
):
    data = home / ".entrabot" / "data"  # the default ENTRABOT_DATA_DIR
    write_tree(data, {"promises.jsonl": "p\n", "notes/a.md": "a"})

    result = cli("migrate")

    assert_one_config_line(
        result, str(data), "ENTRABOT_BLOB_ENDPOINT", "ENTRABOT_BLOB_CONTAINER", "into itself"
    )
    assert stored(snapshot, data) == {"promises.jsonl": b"p\n", "notes/a.md": b"a"}


def test_migrate_refuses_a_source_inside_the_local_store_it_would_copy_into(
    cli, tmp_path, write_tree, snapshot
):
    store = tmp_path / "store"
    write_tree(store, {"claude_memory/profile.md": "me"})

    result = cli(
        "migrate", "--source", f"{store / 'claude_memory'}:claude_memory", env=local_env(store)
    )

    assert_one_config_line(result, str(store), "into itself")
    assert stored(snapshot, store) == {"claude_memory/profile.md": b"me"}


def test_persona_push_defaults_to_claude_codes_auto_memory_of_the_project(
    cli, home, tmp_path, write_tree, snapshot
):
    project = tmp_path / "agent project"
    project.mkdir()
    write_tree(claude_memory_of(home, project), {"MEMORY.md": "- index", "people.md": "alice"})
    store = tmp_path / "store"

    result = cli("persona", "push", "--project", str(project), env=local_env(store))

    assert result.returncode == 0, result.stderr
    assert (
        f"persona memory: {claude_memory_of(home, project)}, Claude Code's directory for the project"
        in result.stdout
    )
    assert stored(snapshot, store) == {
        "claude_memory/MEMORY.md": b"- index",
        "claude_memory/people.md": b"alice",
    }


def test_persona_says_when_the_project_has_no_auto_memory_yet(cli, home, tmp_path):
    result = cli("persona", "push", env=local_env(tmp_path / "store"))

    assert result.returncode == 0, result.stderr
    assert (
        f"persona memory: {claude_memory_of(home, tmp_path)} (absent: nothing there yet)"
        in result.stdout
    )
    assert "copied 0," in result.stdout


@pytest.mark.parametrize(
    ("setting", "missing"),
    [
        ("ENTRABOT_BLOB_ENDPOINT", "ENTRABOT_BLOB_CONTAINER"),
        ("ENTRABOT_BLOB_CONTAINER", "ENTRABOT_BLOB_ENDPOINT"),
    ],
)
def test_half_blob_configuration_exits_two_with_one_line_and_writes_nothing(
    cli, home, tmp_path, write_tree, setting, missing
):
    source = tmp_path / "src"
    write_tree(source, {"a.md": "a"})
    value = (
        "http://127.0.0.1:10000/devstoreaccount1" if setting.endswith("ENDPOINT") else "agent-state"
    )

    result = cli("migrate", "--source", str(source), env={setting: value})

    assert_one_config_line(result, setting, missing)
    assert list(home.iterdir()) == []  # no fallback to a fresh ~/.entrabot/data


def test_unreachable_azurite_exits_two_with_one_line(
    cli, home, tmp_path, write_tree, azurite_like_connection
):
    source = tmp_path / "src"
    write_tree(source, {"a.md": "a"})
    connection_string, endpoint = azurite_like_connection(closed_port())

    result = cli(
        "migrate", "--source", str(source), env=blob_env(connection_string, endpoint, "agent-state")
    )

    assert_one_config_line(result, "ENTRABOT_BLOB_ENDPOINT", "cannot reach")
    assert list(home.iterdir()) == []


def test_malformed_connection_string_exits_two_with_one_line(cli, home):
    endpoint = "http://127.0.0.1:10000/devstoreaccount1"
    env = blob_env("AccountName=devstoreaccount1;no key here", endpoint, "agent-state")

    result = cli("persona", "pull", env=env)

    assert_one_config_line(result, "ENTRABOT_BLOB_CONNECTION_STRING")
    assert list(home.iterdir()) == []  # not even the default persona directory


def test_persona_push_then_pull_round_trip(cli, tmp_path, write_tree, snapshot):
    origin, replica, store = tmp_path / "origin", tmp_path / "replica", tmp_path / "store"
    write_tree(origin, {"profile.md": "me", "people/alice.md": "alice"})

    pushed = cli("persona", "push", "--root", str(origin), env=local_env(store))
    pulled = cli("persona", "pull", "--root", str(replica), env=local_env(store))

    assert pushed.returncode == 0 and "copied 2," in pushed.stdout, pushed.stderr
    assert pulled.returncode == 0 and "copied 2," in pulled.stdout, pulled.stderr
    assert snapshot(replica) == snapshot(origin)


def test_persona_push_with_a_symlink_out_exits_one_and_pushes_the_rest(
    cli, tmp_path, outside, write_tree, snapshot
):
    root, store = tmp_path / "memory", tmp_path / "store"
    write_tree(root, {"profile.md": "me"})
    (root / "leak.md").symlink_to(outside / "secret.txt")

    result = cli("persona", "push", "--root", str(root), env=local_env(store))

    assert result.returncode == 1
    assert "rejected: claude_memory/leak.md: " in result.stderr
    assert stored(snapshot, store) == {"claude_memory/profile.md": b"me"}


def test_persona_push_of_one_file_outside_the_root_exits_one(cli, tmp_path, outside, write_tree):
    root, store = tmp_path / "memory", tmp_path / "store"
    write_tree(root, {"profile.md": "me"})

    result = cli(
        "persona", "push", str(outside / "secret.txt"), "--root", str(root), env=local_env(store)
    )

    assert result.returncode == 1
    assert "is not inside the persona directory" in result.stderr
    assert not (store / "claude_memory").exists()


def test_unexpected_failure_exits_one_with_one_line_and_no_traceback(cli, tmp_path):
    not_a_directory = tmp_path / "memory"
    not_a_directory.write_text("a file where the persona directory should be")

    result = cli(
        "persona", "pull", "--root", str(not_a_directory), env=local_env(tmp_path / "store")
    )

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("entrabot-fleet: FileExistsError"), result.stderr


def test_debug_adds_the_traceback_to_an_unexpected_failure(cli, tmp_path):
    not_a_directory = tmp_path / "memory"
    not_a_directory.write_text("a file where the persona directory should be")

    result = cli(
        "persona",
        "pull",
        "--root",
        str(not_a_directory),
        "--debug",
        env=local_env(tmp_path / "store"),
    )

    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("entrabot-fleet: FileExistsError")
