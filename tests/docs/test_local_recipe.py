"""The README's local recipe is made of commands that exist: every ``entrabot-fleet`` line parses as
the command line parses it, ``make up`` runs the ``up`` it names, and its ``claude`` lines have the
shape ``up`` prints (the fleet itself runs them in tests/devstack/test_local_up.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from service.cli import build_parser
from service.devstack.connect_recipe import ConnectRecipe
from tests.docs.readme_recipe import (
    REPO_ROOT,
    claude_lines,
    fleet_commands,
    local_section,
    up_invocation,
)


def test_every_entrabot_fleet_command_of_the_local_recipe_parses() -> None:
    commands = [up_invocation(), *fleet_commands()]
    assert {argv[1] for argv in commands} == {"up", "say"}, commands
    for argv in commands:
        args = build_parser().parse_args(argv[1:])  # argparse exits on a usage error
        assert args.command == argv[1]
    [say] = [build_parser().parse_args(a[1:]) for a in fleet_commands() if a[1] == "say"]
    assert say.person and say.text


def test_make_up_runs_the_up_command_the_readme_names() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    recipe = re.search(r"^up:.*\n\t(.+)$", makefile, re.M)
    assert recipe, "the Makefile has no `up` target"
    assert recipe.group(1).replace("$(VENV)", ".venv").split() == up_invocation()
    assert "`make up`" in local_section()


def test_the_readmes_claude_lines_are_what_up_prints_for_its_values() -> None:
    add, start = claude_lines()
    argv = shlex.split(add)
    token_file = argv[argv.index("-e") + 1].split("=", 1)[1]
    fleet_url = argv[argv.index("--fleet-url") + 1]
    executable = argv[argv.index("--") + 1]
    assert Path(executable).is_absolute() and Path(token_file).is_absolute()
    recipe = ConnectRecipe(fleet_url, Path(token_file), "unused", (executable,))
    assert add == recipe.claude_mcp_add()
    assert start == recipe.claude_start()
