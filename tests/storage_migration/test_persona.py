"""PersonaBackend: push/pull persona files under claude_memory/, never through a path outside the root."""

from __future__ import annotations

from pathlib import Path

from service.storage.backend import MemoryBackend
from service.storage.persona import PersonaBackend

PERSONA = {
    "profile.md": "# Who I am\n",
    "people/alice.md": "Alice prefers mornings.\n",
    "rules/behaviour.md": "Be brief.\n",
}


async def test_push_all_then_pull_all_reproduces_the_tree(target, tmp_path, write_tree, snapshot):
    origin, replica = tmp_path / "origin", tmp_path / "replica"
    write_tree(origin, PERSONA)

    pushed = await PersonaBackend(target, local_root=origin).push_all()
    pulled = await PersonaBackend(target, local_root=replica).pull_all()

    keys = sorted(f"claude_memory/{rel}" for rel in PERSONA)
    assert pushed.copied == keys and pushed.ok
    assert pulled.copied == keys and pulled.ok
    assert snapshot(replica) == snapshot(origin)


async def test_push_all_never_overwrites_what_the_cloud_holds(target, tmp_path, write_tree):
    root = tmp_path / "memory"
    write_tree(root, {"profile.md": "local edit", "new.md": "new"})
    await target.write_text("claude_memory/profile.md", "cloud copy")

    report = await PersonaBackend(target, local_root=root).push_all()

    assert report.skipped == ["claude_memory/profile.md"] and report.copied == [
        "claude_memory/new.md"
    ]
    assert await target.read_text("claude_memory/profile.md") == "cloud copy"


async def test_push_one_overwrites_the_cloud_copy_of_that_file(target, tmp_path, write_tree):
    root = tmp_path / "memory"
    write_tree(root, {"profile.md": "local edit"})
    await target.write_text("claude_memory/profile.md", "cloud copy")

    report = await PersonaBackend(target, local_root=root).push_one(root / "profile.md")

    assert report.copied == ["claude_memory/profile.md"] and report.ok
    assert await target.read_text("claude_memory/profile.md") == "local edit"


async def test_push_one_takes_a_relative_path_from_the_working_directory(
    target, tmp_path, write_tree, monkeypatch
):
    root = tmp_path / "memory"
    write_tree(root, {"people/bob.md": "Bob"})
    monkeypatch.chdir(root / "people")

    report = await PersonaBackend(target, local_root=root).push_one(Path("bob.md"))

    assert report.copied == ["claude_memory/people/bob.md"]


async def test_pull_all_overwrites_local_files_and_keeps_local_only_ones(
    target, tmp_path, write_tree, snapshot
):
    root = tmp_path / "memory"
    write_tree(root, {"profile.md": "stale local", "scratch.md": "only here"})
    await target.write_text("claude_memory/profile.md", "cloud is authoritative")

    report = await PersonaBackend(target, local_root=root).pull_all()

    assert report.copied == ["claude_memory/profile.md"]
    assert snapshot(root) == {"profile.md": b"cloud is authoritative", "scratch.md": b"only here"}


async def test_push_one_rejects_paths_outside_the_root_and_reads_nothing(
    target, tmp_path, outside, write_tree
):
    root = tmp_path / "memory"
    write_tree(root, {"profile.md": "p"})
    (root / "leak.md").symlink_to(outside / "secret.txt")
    persona = PersonaBackend(target, local_root=root)

    attempts = [
        root / ".." / "outside" / "secret.txt",
        outside / "secret.txt",
        root / "leak.md",
        root,
    ]
    reports = [await persona.push_one(path) for path in attempts]

    assert [len(report.rejected) for report in reports] == [1, 1, 1, 1]
    assert all(not report.copied and not report.ok for report in reports)
    assert await target.list("") == []


async def test_push_all_rejects_symlinks_out_and_still_pushes_the_rest(
    target, tmp_path, outside, write_tree, store_contents
):
    root = tmp_path / "memory"
    write_tree(root, PERSONA)
    (root / "leak.md").symlink_to(outside / "secret.txt")
    (root / "people" / "leakdir").symlink_to(outside)

    report = await PersonaBackend(target, local_root=root).push_all()

    assert [key for key, _ in report.rejected] == [
        "claude_memory/leak.md",
        "claude_memory/people/leakdir",
    ]
    assert report.copied == sorted(f"claude_memory/{rel}" for rel in PERSONA)
    assert "do not copy" not in (await store_contents(target)).values()


class ContainerWithForgedKeys:
    """A container that also lists keys no validating writer can create (``..``, absolute paths)."""

    def __init__(self, inner: MemoryBackend, forged: dict[str, str]) -> None:
        self._inner, self._forged = inner, forged

    async def list(self, prefix: str = "") -> list[str]:
        forged = [key for key in self._forged if key.startswith(prefix)]
        return sorted(await self._inner.list(prefix) + forged)

    async def read_text(self, key: str) -> str | None:
        return self._forged[key] if key in self._forged else await self._inner.read_text(key)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


async def test_pull_all_rejects_keys_and_symlinks_leading_out_and_still_pulls_the_rest(
    target, tmp_path, outside, snapshot
):
    root = tmp_path / "deep" / "memory"
    root.mkdir(parents=True)
    (root / "linkdir").symlink_to(outside)
    (root / "linkfile.md").symlink_to(outside / "secret.txt")
    await target.write_text("claude_memory/linkdir/planted.md", "through a symlinked directory")
    await target.write_text("claude_memory/linkfile.md", "through a symlinked file")
    await target.write_text("claude_memory/ok.md", "legitimate")
    await target.write_text("claude_memory/people/alice.md", "legitimate too")
    forged = {
        "claude_memory/../../outside/planted.md": "dot-dot",
        "claude_memory//outside/planted.md": "absolute",
    }
    outside_before = snapshot(outside)

    report = await PersonaBackend(
        ContainerWithForgedKeys(target, forged), local_root=root
    ).pull_all()

    assert sorted(key for key, _ in report.rejected) == sorted(
        [*forged, "claude_memory/linkdir/planted.md", "claude_memory/linkfile.md"]
    )
    assert report.copied == ["claude_memory/ok.md", "claude_memory/people/alice.md"]
    assert snapshot(outside) == outside_before
    assert not (tmp_path / "deep" / "outside").exists()
    assert (root / "ok.md").read_text() == "legitimate"
    assert (root / "linkfile.md").is_symlink()


async def test_a_root_that_is_itself_a_symlink_is_used_as_the_root(
    target, tmp_path, write_tree, snapshot
):
    real = tmp_path / "dotfiles" / "memory"
    write_tree(real, {"profile.md": "p"})
    link = tmp_path / "home-claude-memory"
    link.symlink_to(real)
    persona = PersonaBackend(target, local_root=link)

    pushed = await persona.push_one(link / "profile.md")
    await target.write_text("claude_memory/new.md", "from the cloud")
    pulled = await persona.pull_all()

    assert pushed.copied == ["claude_memory/profile.md"]
    assert pulled.ok and sorted(pulled.copied) == [
        "claude_memory/new.md",
        "claude_memory/profile.md",
    ]
    assert snapshot(real) == {"new.md": b"from the cloud", "profile.md": b"p"}
