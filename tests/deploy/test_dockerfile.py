"""The Dockerfile: lint-clean, legacy-builder compatible, base image as a build argument, non-root,
a python HEALTHCHECK on /healthz, and a command the CLI knows; .dockerignore sends only the sources."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from docker.utils.build import exclude_paths

from tests.deploy.deploy_facts import DOCKERFILE, REPO_ROOT, assert_is_cli_command

HADOLINT = Path(sys.executable).parent / "hadolint"
# The service's, the npm Azurite's (docker-compose.yml's Azurite where no registry is reachable), and
# the Node base the tests build that one on.
EVERY_DOCKERFILE = (
    DOCKERFILE,
    REPO_ROOT / "azurite" / "Dockerfile",
    REPO_ROOT / "tests" / "deploy" / "node-base.Dockerfile",
)
# What the legacy builder accepts on COPY/ADD; anything else (--chmod, --link, --mount...) needs BuildKit.
LEGACY_COPY_FLAGS = {"--from", "--chown"}


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    line: int


def read_instructions(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped.

    Hand-written: the only other reader here is hadolint, which lints but exposes no syntax tree.
    """
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, arguments = (pending + stripped).partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
        pending = ""
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return read_instructions(DOCKERFILE)


@pytest.mark.parametrize(
    "dockerfile", EVERY_DOCKERFILE, ids=lambda path: str(path.relative_to(REPO_ROOT))
)
def test_dockerfile_passes_hadolint(dockerfile: Path) -> None:
    result = subprocess.run(
        [str(HADOLINT), str(dockerfile)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_base_image_is_a_build_argument_defaulting_to_python_slim_pinned_by_digest(
    instructions: list[Instruction],
) -> None:
    assert instructions[0].keyword == "ARG"
    name, _, default = instructions[0].arguments.partition("=")
    assert name == "BASE_IMAGE"
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim-bookworm@sha256:[0-9a-f]{64}", default), default
    froms = [i.arguments.split()[0] for i in instructions if i.keyword == "FROM"]
    assert len(froms) == 2, "a builder stage and a final stage"
    assert froms == ["${BASE_IMAGE}", "${BASE_IMAGE}"]


@pytest.mark.parametrize(
    "dockerfile", EVERY_DOCKERFILE, ids=lambda path: str(path.relative_to(REPO_ROOT))
)
def test_dockerfile_uses_no_buildkit_only_syntax(dockerfile: Path) -> None:
    assert not re.search(r"^#\s*syntax\s*=", dockerfile.read_text(), re.MULTILINE), (
        "parser directives need BuildKit"
    )
    for instruction in read_instructions(dockerfile):
        assert "<<" not in instruction.arguments, f"line {instruction.line}: heredocs need BuildKit"
        flags = {
            word.split("=")[0] for word in instruction.arguments.split() if word.startswith("--")
        }
        if instruction.keyword in ("COPY", "ADD"):
            assert flags <= LEGACY_COPY_FLAGS, (
                f"line {instruction.line}: {flags - LEGACY_COPY_FLAGS} need BuildKit"
            )
        if instruction.keyword == "RUN":
            assert not any(
                word.startswith("--mount") or word.startswith("--network") for word in flags
            )


def test_final_stage_runs_as_a_fixed_numeric_non_root_user(instructions: list[Instruction]) -> None:
    final = stages(instructions)[-1]
    args = dict(
        i.arguments.split("=", 1) for i in final if i.keyword == "ARG" and "=" in i.arguments
    )
    users = [i.arguments for i in final if i.keyword == "USER"]
    assert len(users) == 1
    uid, _, gid = users[0].replace("${APP_UID}", args.get("APP_UID", "")).partition(":")
    assert uid.isdigit() and int(uid) >= 1000 and gid == uid


def test_final_stage_copies_only_the_venv_and_seeds_from_the_builder(
    instructions: list[Instruction],
) -> None:
    final = stages(instructions)[-1]
    copies = [i.arguments for i in final if i.keyword in ("COPY", "ADD")]
    assert copies == ["--from=builder /opt/venv /opt/venv", "--from=builder /app /app"]
    runs = " ".join(i.arguments for i in final if i.keyword == "RUN")
    assert " install " not in f" {runs} ", (
        "the final stage installs nothing (the builder stage does)"
    )
    for tool in ("apt-get", "gcc", "curl", "wget"):
        assert tool not in runs, f"the final stage must not run {tool}"


def test_healthcheck_asks_healthz_with_the_image_python(instructions: list[Instruction]) -> None:
    checks = [i.arguments for i in stages(instructions)[-1] if i.keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    command = json.loads(checks[0].split("CMD", 1)[1])
    assert command[0] == "/opt/venv/bin/python"
    assert "/healthz" in command[-1] and "ENTRABOT_PORT" in command[-1]


def test_image_command_is_an_entrabot_fleet_subcommand(
    instructions: list[Instruction], cli_parser
) -> None:
    final = stages(instructions)[-1]
    entrypoint = [json.loads(i.arguments) for i in final if i.keyword == "ENTRYPOINT"]
    cmd = [json.loads(i.arguments) for i in final if i.keyword == "CMD"]
    assert entrypoint == [["entrabot-fleet"]]
    assert cmd == [["serve"]]
    assert_is_cli_command(cli_parser, cmd[0])


def test_image_listens_on_all_interfaces_with_data_dir_on_the_writable_volume(
    instructions: list[Instruction],
) -> None:
    env = " ".join(i.arguments for i in stages(instructions)[-1] if i.keyword == "ENV")
    pairs = dict(word.split("=", 1) for word in shlex.split(env) if "=" in word)
    assert pairs["ENTRABOT_HOST"] == "0.0.0.0"
    assert pairs["ENTRABOT_PORT"] == "8080"
    assert pairs["ENTRABOT_DATA_DIR"] == "/var/lib/entrabot/data"


def test_dockerignore_sends_the_package_sources_and_nothing_else() -> None:
    patterns = [
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sent = exclude_paths(str(REPO_ROOT), patterns, dockerfile="Dockerfile")
    top_level = {Path(p).parts[0] for p in sent}
    assert {"pyproject.toml", "README.md", "service", "emulator"} <= top_level
    assert top_level <= {
        "pyproject.toml",
        "README.md",
        "requirements.lock",
        "service",
        "emulator",
        "Dockerfile",
        ".dockerignore",
        "pip-ca.crt",
    }
    assert not [p for p in sent if "__pycache__" in p or p.endswith(".pyc")]


def test_dependencies_install_only_from_the_hashed_lock_and_the_project_without_deps(
    instructions: list[Instruction],
) -> None:
    runs = [
        i.arguments
        for i in stages(instructions)[0]
        if i.keyword == "RUN" and "pip install" in i.arguments
    ]
    assert len(runs) == 2
    locked, project = runs
    assert "--require-hashes" in locked and "-r requirements.lock" in locked
    assert "--no-deps" in project and "--no-build-isolation" in project
    lock = (REPO_ROOT / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==\S+ \\$", lock, re.MULTILINE)
    assert {"setuptools", "fastapi", "mcp", "azure-storage-blob"} <= {p.lower() for p in pins}
    assert lock.count("--hash=sha256:") >= len(pins)
    assert "--find-links" not in lock and "--index-url" not in lock, (
        "the lock must not name this host's indexes"
    )


def test_final_image_carries_oci_labels(instructions: list[Instruction]) -> None:
    labels = " ".join(i.arguments for i in stages(instructions)[-1] if i.keyword == "LABEL")
    keys = {word.split("=", 1)[0] for word in shlex.split(labels)}
    for key in ("title", "description", "version", "revision", "created", "source"):
        assert f"org.opencontainers.image.{key}" in keys


def test_the_make_targets_the_dockerfile_and_the_docs_name_exist() -> None:
    targets = set(
        re.findall(r"^([a-z][\w-]*):", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    )
    documents = [
        DOCKERFILE,
        REPO_ROOT / "deploy" / "README.md",
        *sorted((REPO_ROOT / "docs").glob("*.md")),
    ]
    named = {
        (path.name, target)
        for path in documents
        for target in re.findall(r"`make (\w[\w-]*)", path.read_text())
    }
    assert ("Dockerfile", "lock") in named, "the Dockerfile says how the lock is regenerated"
    assert {(name, target) for name, target in named if target not in targets} == set()
