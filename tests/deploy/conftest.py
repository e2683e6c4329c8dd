"""Fixtures of the deployment tests."""

from __future__ import annotations

import argparse

import pytest

from service.cli import build_parser


@pytest.fixture(scope="session")
def cli_parser() -> argparse.ArgumentParser:
    """The real `entrabot-fleet` argument parser, so image and compose commands cannot drift from it."""
    return build_parser()
