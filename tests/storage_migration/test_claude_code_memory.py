"""The default persona directory is where Claude Code keeps the project's auto memory.

The expected directories are what the real Claude Code 2.1.332 named in its system prompt for the same
layouts (a repository whose path has a space, an underscore and dots; its subdirectory; a linked
worktree; a folder outside git; autoMemoryDirectory settings): see service/storage/claude_code_memory.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from service.storage.claude_code_memory import ClaudeMemoryError, locate_claude_memory, plain_slug


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit (a worktree needs one), at a path with a space, "_" and dots."""
    path = tmp_path / "my repo_v1.2"
    (path / "sub dir").mkdir(parents=True)
    git("init", "-q", cwd=path)
    git(
        "-c",
        "user.email=a@example.com",
        "-c",
        "user.name=a",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
        cwd=path,
    )
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / ".claude").mkdir(parents=True)
    return tmp_path / "home"


def test_every_character_but_letters_and_digits_becomes_a_dash() -> None:
    assert (
        plain_slug(Path("/tmp/seeds_scratch/run/my repo_v1.2"))
        == "-tmp-seeds-scratch-run-my-repo-v1-2"
    )


def test_a_repository_its_subdirectory_and_a_linked_worktree_share_the_main_worktrees_directory(
    repo: Path, home: Path, tmp_path: Path
) -> None:
    linked = tmp_path / "wt.linked"
    git("worktree", "add", "-q", str(linked), "-b", "other", cwd=repo)
    expected = home / ".claude" / "projects" / plain_slug(repo.resolve()) / "memory"

    found = [locate_claude_memory(start, home=home) for start in (repo, repo / "sub dir", linked)]

    assert [f.directory for f in found] == [expected] * 3
    assert {f.project for f in found} == {repo.resolve()}


def test_a_folder_outside_git_has_its_own_directory(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "no_git.dir"
    folder.mkdir()

    found = locate_claude_memory(folder, home=home)

    assert (
        found.directory == home / ".claude" / "projects" / plain_slug(folder.resolve()) / "memory"
    )
    assert found.directory.name == "memory" and "_" not in found.directory.parent.name


def test_auto_memory_directory_settings_win_local_over_project_over_user(
    home: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "custom"
    (folder / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"autoMemoryDirectory": "~/mem/user"})
    )
    assert locate_claude_memory(folder, home=home).directory == home / "mem" / "user"

    (folder / ".claude" / "settings.json").write_text(
        json.dumps({"autoMemoryDirectory": "~/mem/project"})
    )
    assert locate_claude_memory(folder, home=home).directory == home / "mem" / "project"

    absolute = tmp_path / "elsewhere"
    (folder / ".claude" / "settings.local.json").write_text(
        json.dumps({"autoMemoryDirectory": str(absolute)})
    )
    found = locate_claude_memory(folder, home=home)
    assert found.directory == absolute and "settings.local.json" in found.why


@pytest.mark.parametrize("value", ["relative/dir", 42])
def test_an_auto_memory_directory_claude_code_would_not_take_is_refused(
    home: Path, tmp_path: Path, value
) -> None:
    (home / ".claude" / "settings.json").write_text(json.dumps({"autoMemoryDirectory": value}))

    with pytest.raises(ClaudeMemoryError, match="must be an absolute path or start with ~/"):
        locate_claude_memory(tmp_path, home=home)


def test_a_settings_file_that_is_not_json_is_named(home: Path, tmp_path: Path) -> None:
    (home / ".claude" / "settings.json").write_text("{not json")

    with pytest.raises(ClaudeMemoryError, match="settings.json is not JSON"):
        locate_claude_memory(tmp_path, home=home)


def test_a_path_too_long_for_a_plain_name_is_found_by_its_hashed_directory(
    home: Path, tmp_path: Path
) -> None:
    folder = tmp_path / ("x" * 120) / ("y" * 120)
    folder.mkdir(parents=True)
    slug = plain_slug(folder.resolve())
    with pytest.raises(ClaudeMemoryError, match="too long"):
        locate_claude_memory(
            folder, home=home
        )  # Claude Code has not run there: no directory to find

    hashed = home / ".claude" / "projects" / f"{slug[:200]}-opkeq6"
    (hashed / "memory").mkdir(parents=True)
    (home / ".claude" / "projects" / f"{slug[:200]}-other-project").mkdir()  # not a hash suffix

    assert locate_claude_memory(folder, home=home).directory == hashed / "memory"
