"""requirements.lock pins every runtime dependency pyproject.toml declares, at a version its range allows:
a dependency added or re-ranged without `make lock` fails here, not in the image build."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from tests.deploy.deploy_facts import REPO_ROOT


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"]]


def locked() -> dict[NormalizedName, Version]:
    """The lock's pins (`name==version \\`), by PEP 503 normalised name."""
    text = (REPO_ROOT / "requirements.lock").read_text()
    return {
        canonicalize_name(name): Version(version)
        for name, version in re.findall(
            r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==(\S+) \\$", text, re.MULTILINE
        )
    }


def test_the_lock_is_read_by_normalised_name() -> None:
    pins = locked()
    assert len(pins) > 40
    assert canonicalize_name("Azure_Storage.Blob") in pins and canonicalize_name("PyJWT") in pins


@pytest.mark.parametrize("requirement", declared(), ids=str)
def test_every_runtime_dependency_is_pinned_in_the_lock_within_its_range(
    requirement: Requirement,
) -> None:
    pins = locked()
    name = canonicalize_name(requirement.name)
    assert name in pins, (
        f"{requirement.name} is in pyproject.toml but not in requirements.lock: run `make lock`"
    )
    assert requirement.specifier.contains(pins[name], prereleases=True), (
        f"requirements.lock pins {name}=={pins[name]}, outside pyproject.toml's {requirement}: run `make lock`"
    )


@pytest.mark.parametrize("requirement", [r for r in declared() if r.extras], ids=str)
def test_what_a_dependencys_extras_add_is_pinned_too(requirement: Requirement) -> None:
    # The extras' own requirements, from the installed distribution's metadata (the venv is installed
    # from the lock, `make setup`).
    pins = locked()
    added = [Requirement(line) for line in metadata.requires(requirement.name) or []]
    needed = {
        canonicalize_name(r.name)
        for r in added
        for extra in requirement.extras
        if r.marker is not None and r.marker.evaluate({"extra": extra})
    }
    assert needed, f"{requirement}: its extras add nothing installed here"
    assert needed - set(pins) == set(), f"{requirement}: not in requirements.lock: run `make lock`"
