"""Fixtures of the deployment tests: the CLI parser, and the Docker engine with the images built on
it, once per test session (every test using them is in the "docker" xdist group: one worker)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from service.cli import build_parser
from tests.deploy.azurite_image import build_azurite_image
from tests.deploy.docker_engine import Engine, EngineUnavailable, start_engine
from tests.deploy.image_build import build_service_image


@pytest.fixture(scope="session")
def cli_parser() -> argparse.ArgumentParser:
    """The real `entrabot-fleet` argument parser, so image and compose commands cannot drift from it."""
    return build_parser()


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    """Debian's dockerd on a private socket (root and deploy/docker/ci-setup.sh needed), else a skip
    that says why."""
    try:
        instance = start_engine()
    except EngineUnavailable as exc:
        pytest.skip(f"no Docker engine: {exc}")
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def fleet_image(engine: Engine) -> Iterator[str]:
    """The repository's Dockerfile on the debootstrap base (image_build.py)."""
    yield build_service_image(engine.client)
    # Old builds' layers, unless recent: those are the next build's cache.
    engine.client.images.prune(filters={"dangling": True, "until": "24h"})


@pytest.fixture(scope="session")
def azurite_image(engine: Engine) -> str:
    """azurite/Dockerfile (the pinned npm Azurite) on the same base, with Node added (azurite_image.py)."""
    return build_azurite_image(engine.client)
