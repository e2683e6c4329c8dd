"""ENTRABOT_AZURITE=testcontainers: the Blob half of the storage contract runs again, in a pytest of
its own, on Azurite started through testcontainers from the locally built image (azurite/Dockerfile).

This is the CI path of the switch (`make test` runs it with the other Docker tests). The contract's
5,000-key paging test is left to the npm run: it costs half a minute and checks the same Azurite
release. The run must start exactly one Azurite container, through testcontainers, and leave none.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.deploy.deploy_facts import REPO_ROOT
from tests.deploy.docker_engine import SOCKET, Engine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("docker")]

CONTRACT = "tests/storage/test_storage_contract.py"
BLOB_HALF = "blob and not more_than_5000_keys"
# What pytest-xdist and pytest tell a worker about itself: not for the pytest started here.
PARENT_PYTEST_NAMES = (
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_WORKER_COUNT",
    "PYTEST_XDIST_TESTRUNUID",
    "PYTEST_CURRENT_TEST",
)


def test_the_storage_contract_holds_on_azurite_started_through_testcontainers(
    engine: Engine, azurite_image: str, tmp_path: Path
) -> None:
    report = tmp_path / "contract.xml"
    env = {name: value for name, value in os.environ.items() if name not in PARENT_PYTEST_NAMES}
    env.update(
        {
            "ENTRABOT_AZURITE": "testcontainers",
            "ENTRABOT_AZURITE_IMAGE": azurite_image,
            "DOCKER_HOST": f"unix://{SOCKET}",
            # Ryuk, testcontainers' reaper, comes only from a registry; the run removes its container itself.
            "TESTCONTAINERS_RYUK_DISABLED": "true",
        }
    )
    since = int(time.time())
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            BLOB_HALF,
            CONTRACT,
            f"--junitxml={report}",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    until = int(time.time()) + 1
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert suite is not None
    counts = {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] > 0 and counts == {**counts, "failures": 0, "errors": 0, "skipped": 0}, (
        counts
    )

    started = list(
        engine.client.events(
            since=since,
            until=until,
            decode=True,
            filters={"type": "container", "event": "start", "image": azurite_image},
        )
    )
    assert len(started) == 1, f"one session Azurite, in a container of {azurite_image}: {started}"
    attributes = started[0]["Actor"]["Attributes"]
    assert attributes.get("org.testcontainers") == "true", (
        f"not started through testcontainers: {attributes}"
    )
    left = engine.client.containers.list(all=True, filters={"id": started[0]["Actor"]["ID"]})
    assert left == [], "the session's Azurite container outlived the run"
