"""Builds an Azurite image on an engine with no registry: azurite/Dockerfile (the pinned npm release)
on the tests' debootstrap base with Node.js added (node-base.Dockerfile), in place of Microsoft's
mcr.microsoft.com/azure-storage/azurite that docker-compose.yml names.

The layers stay in the engine's data root between runs, so only the first build pays for npm ci.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import docker

from tests.deploy.image_build import (
    CA_BUNDLE_NAME,
    REPO_ROOT,
    IndexAccess,
    build_context,
    build_image,
    ensure_base_image,
    host_pip_access,
)

AZURITE_DIR = REPO_ROOT / "azurite"
NODE_BASE_DOCKERFILE = Path(__file__).with_name("node-base.Dockerfile")
NODE_BASE_IMAGE = "entrabot-fleet-test-node:bookworm"
AZURITE_IMAGE = "entrabot-azurite:image-test"
NPM_CA_NAME = "npm-ca.crt"  # azurite/Dockerfile copies it when present, and removes it after npm ci
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def host_npm_access() -> IndexAccess:
    """The registry and CA bundle npm uses on this host (`npm config get`), for npm inside the build."""
    ca = next(
        (
            Path(p)
            for p in (
                _npm_config("cafile"),
                os.environ.get("NODE_EXTRA_CA_CERTS"),
                SYSTEM_CA_BUNDLE,
            )
            if p and Path(p).is_file()
        ),
        None,
    )
    args: dict[str, str] = {}
    registry = _npm_config("registry")
    if registry:
        args["NPM_CONFIG_REGISTRY"] = registry
    if ca is not None:
        args["NPM_CONFIG_CAFILE"] = f"/opt/azurite/{NPM_CA_NAME}"
    return IndexAccess(ca, args)


def build_node_base(client: docker.DockerClient, base: str, pip: IndexAccess, workdir: Path) -> str:
    context = workdir / "node-base"
    context.mkdir(parents=True)
    shutil.copyfile(NODE_BASE_DOCKERFILE, context / "Dockerfile")
    if pip.ca_bundle is not None:
        shutil.copyfile(pip.ca_bundle, context / CA_BUNDLE_NAME)
    return build_image(client, context, NODE_BASE_IMAGE, {"BASE_IMAGE": base, **pip.build_args})


def build_azurite_image(client: docker.DockerClient) -> str:
    with tempfile.TemporaryDirectory(prefix="entrabot-azurite-image-") as tmp:
        workdir = Path(tmp)
        node_base = build_node_base(
            client, ensure_base_image(client, workdir), host_pip_access(), workdir
        )
        npm = host_npm_access()
        context = build_context(
            workdir / "azurite", source=AZURITE_DIR, extra={NPM_CA_NAME: npm.ca_bundle}
        )
        return build_image(
            client, context, AZURITE_IMAGE, {"BASE_IMAGE": node_base, **npm.build_args}
        )


def _npm_config(key: str) -> str:
    """One npm setting, or "" when npm is missing or the setting is unset."""
    npm = shutil.which("npm")
    if npm is None:
        return ""
    result = subprocess.run([npm, "config", "get", key], capture_output=True, text=True, timeout=60)
    value = result.stdout.strip()
    return value if result.returncode == 0 and value not in ("", "undefined", "null") else ""
