"""Where Claude Code keeps a project's auto memory: the default persona directory of migrate and persona.

Read in Claude Code's documentation (the memory page, code.claude.com/docs/en/memory, as quoted by
the pages the ``search`` tool found; the page itself was not in the corpus): "files live at
``~/.claude/projects/<project>/memory/``. The <project> segment is derived from your git repo, so all
worktrees and subdirectories of the same repo share one directory. Outside a git repo, the project root
is used." An ``autoMemoryDirectory`` setting moves it; "the path must be absolute or start with ``~/``".
How <project> is spelled is not documented.

Run against the real Claude Code 2.1.332 here (it names the directory in the system prompt it sends the
model; a fake Messages API recorded it, 2026-12):

* the slug is the absolute project root with every character that is not an ASCII letter or digit
  replaced by ``-``: ``/tmp/run/my repo_v1.2`` → ``-tmp-run-my-repo-v1-2`` (the single-host system's
  rule, which replaced only ``/``, ``\\`` and spaces, misses ``_`` and ``.``);
* a subdirectory and a linked worktree of a repository both get the main worktree's directory; a
  folder outside git gets its own;
* a slug longer than 200 characters is cut at 200 and given ``-<hash>`` (``-opkeq6``); the hash is
  not reproduced here, so such a project's directory is found by listing ``~/.claude/projects``;
* ``autoMemoryDirectory`` was taken from the folder's ``.claude/settings.local.json``, from its
  ``.claude/settings.json`` (which the pages say Claude Code refuses; 2.1.332 took it in a trusted
  folder) over the user's ``~/.claude/settings.json``, and from the user's alone; ``~/`` is the home.
  That was a folder outside git; for a repository the files read here are the main worktree's.

Not read and not run: managed policy settings, the ``--settings`` flag, ``CLAUDE_CONFIG_DIR``, the
settings of a repository's subdirectory, a bare repository's worktrees. Where those apply, the CLI
takes the directory explicitly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

MAX_PLAIN_SLUG = 200
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")
_HASH_SUFFIX = re.compile(r"[a-z0-9]+")
SETTING = "autoMemoryDirectory"


class ClaudeMemoryError(Exception):
    """The directory cannot be told; the message says what to pass instead."""


@dataclass(frozen=True)
class ClaudeMemory:
    """A project's auto-memory directory and how it was found (for the line the CLI prints)."""

    directory: Path
    project: Path
    why: str


def project_root(start: Path) -> Path:
    """The folder Claude Code keys memory by: the main worktree of the git repository holding ``start``,
    else ``start`` itself."""
    here = start.resolve()
    for folder in (here, *here.parents):
        dot_git = folder / ".git"
        if dot_git.is_dir():
            return folder
        if dot_git.is_file():
            return _main_worktree(folder, dot_git)
    return here


def _main_worktree(folder: Path, dot_git: Path) -> Path:
    """A linked worktree's ``.git`` file names its git dir, whose ``commondir`` is the main ``.git``."""
    text = dot_git.read_text(errors="replace").strip()
    if not text.startswith("gitdir:"):
        return folder
    git_dir = (folder / text.removeprefix("gitdir:").strip()).resolve()
    common_file = git_dir / "commondir"
    if not common_file.is_file():
        return folder  # a submodule: its own checkout is the project
    common = (git_dir / common_file.read_text().strip()).resolve()
    return common.parent if common.name == ".git" else folder


def plain_slug(root: Path) -> str:
    return _NOT_ALNUM.sub("-", str(root))


def locate_claude_memory(start: Path, *, home: Path) -> ClaudeMemory:
    """The auto-memory directory Claude Code uses when run in ``start`` (it need not exist yet)."""
    root = project_root(start)
    for settings_file in (
        root / ".claude" / "settings.local.json",
        root / ".claude" / "settings.json",
        home / ".claude" / "settings.json",
    ):
        configured = _configured_directory(settings_file, home)
        if configured is not None:
            return ClaudeMemory(configured, root, f"{SETTING} in {settings_file}")
    projects = home / ".claude" / "projects"
    slug = plain_slug(root)
    if len(slug) <= MAX_PLAIN_SLUG:
        return ClaudeMemory(
            projects / slug / "memory", root, f"Claude Code's directory for the project {root}"
        )
    return ClaudeMemory(
        _hashed_project_dir(projects, slug, root) / "memory",
        root,
        f"Claude Code's directory for the project {root} (found by listing {projects})",
    )


def _configured_directory(settings_file: Path, home: Path) -> Path | None:
    try:
        text = settings_file.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ClaudeMemoryError(f"cannot read {settings_file} ({exc.strerror}); fix it") from None
    try:
        settings = json.loads(text)
    except json.JSONDecodeError:
        raise ClaudeMemoryError(f"{settings_file} is not JSON; fix it") from None
    value = settings.get(SETTING) if isinstance(settings, dict) else None
    if value is None:
        return None
    if not isinstance(value, str) or not (value.startswith("~/") or Path(value).is_absolute()):
        raise ClaudeMemoryError(
            f"{SETTING} in {settings_file} must be an absolute path or start with ~/ "
            f"(it is {value!r}); fix it"
        )
    return home / value[2:] if value.startswith("~/") else Path(value)


def _hashed_project_dir(projects: Path, slug: str, root: Path) -> Path:
    prefix = slug[:MAX_PLAIN_SLUG] + "-"
    try:
        names = [p.name for p in projects.iterdir() if p.is_dir()]
    except FileNotFoundError:
        names = []
    found = [n for n in names if n.startswith(prefix) and _HASH_SUFFIX.fullmatch(n[len(prefix) :])]
    if len(found) == 1:
        return projects / found[0]
    what = "no directory" if not found else f"{len(found)} directories"
    raise ClaudeMemoryError(
        f"the path of {root} is too long for Claude Code's plain directory name (it adds a hash), and "
        f"{projects} holds {what} starting with its first {MAX_PLAIN_SLUG} characters"
    )
