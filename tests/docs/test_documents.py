"""The documents a reader meets: the README stays a first read, and every page it sends the reader to
says what the code does today (links resolve, every setting and every shared record is documented)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from service.config import Settings
from service.devstack.dev_environment import DevstackSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
DOCUMENTS = sorted([README, REPO_ROOT / "deploy" / "README.md", *DOCS.glob("*.md")])
# A first read: what it is, the two commands, the demo, connecting Claude Code, where to read on.
README_MAX_LINES = 260
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.+)$", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(document: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(document.read_text())}


def relative_links(document: Path) -> list[str]:
    return [
        target for target in LINK.findall(document.read_text()) if not re.match(r"[a-z]+:", target)
    ]


def test_readme_is_a_first_read() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; keep it a first read and move the manual into docs/"
    )
    text = README.read_text()
    for must in ("make demo", "make test", "## Connect Claude Code", "## Where to read on"):
        assert must in text


def test_readme_sends_the_reader_to_every_page_in_docs() -> None:
    linked = {Path(t.split("#")[0]).name for t in relative_links(README) if t.startswith("docs/")}
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages <= linked, f"docs pages the README does not name: {sorted(pages - linked)}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    broken = []
    for target in relative_links(document):
        path_part, _, anchor = target.partition("#")
        destination = (document.parent / path_part).resolve() if path_part else document
        if not destination.exists():
            broken.append(target)
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(target)
    assert not broken, f"{document.relative_to(REPO_ROOT)}: links to nothing: {broken}"


@pytest.mark.parametrize("settings", [Settings, DevstackSettings], ids=["replica", "local tooling"])
def test_every_setting_is_documented(settings: type[BaseSettings]) -> None:
    text = (DOCS / "configuration.md").read_text()
    # In backticks: ENTRABOT_AZURITE is also the start of ENTRABOT_AZURITE_DIR.
    missing = [
        f"ENTRABOT_{name.upper()}"
        for name in settings.model_fields
        if f"`ENTRABOT_{name.upper()}`" not in text
    ]
    assert not missing, f"docs/configuration.md does not name: {missing}"


def key_constants() -> dict[str, str]:
    """Module-level ``…KEY``/``…PREFIX`` strings that name records in the shared container."""
    found: dict[str, str] = {}
    for package in ("ledger", "notifications", "storage", "doctor", "tools"):
        for module in (REPO_ROOT / "service" / package).rglob("*.py"):
            for node in ast.parse(module.read_text()).body:
                if not (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and re.fullmatch(r"[A-Z_]*(KEY|PREFIX)", node.targets[0].id)
                    and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)
                ):
                    continue
                value = node.value.value
                if re.fullmatch(
                    r"[a-z_]+(/[a-z_.]*)?|[a-z_]+\.[a-z]+", value
                ):  # a key, not a text prefix
                    found[f"{module.relative_to(REPO_ROOT)}:{node.targets[0].id}"] = value
    return found


def test_every_shared_record_is_in_the_architecture_page() -> None:
    records = (DOCS / "architecture.md").read_text().split("## The records in the container", 1)[1]
    constants = key_constants()
    assert len(constants) >= 15, "the scan for record keys found too few: has the code moved?"
    missing = {where: key for where, key in constants.items() if f"`{key}" not in records}
    assert not missing, f"records not described in docs/architecture.md: {missing}"


def test_every_fleet_role_is_in_the_architecture_page() -> None:
    roles_section = (DOCS / "architecture.md").read_text().split("## The fleet roles", 1)[1]
    roles = set()
    for module in (REPO_ROOT / "service").rglob("*.py"):
        roles |= set(re.findall(r'^ROLE = "([a-z_]+)"', module.read_text(), re.M))
    assert len(roles) >= 4
    missing = sorted(r for r in roles if f"`{r}`" not in roles_section)
    assert not missing, f"fleet roles not described in docs/architecture.md: {missing}"
