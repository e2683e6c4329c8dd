"""Builds the service image on an engine with no registry: a Debian base made by debootstrap, then
the repository's Dockerfile with that base as its BASE_IMAGE build argument.

The base has Debian's python3 (3.11 on bookworm) where the real base (python:3.11-slim-bookworm)
has its own build; the Dockerfile uses only `python3 -m venv`, which both provide.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import docker

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "entrabot-fleet-test-base:bookworm"
IMAGE = "entrabot-fleet:image-test"
DEBIAN_MIRROR = os.environ.get("ENTRABOT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
CA_BUNDLE_NAME = (
    "pip-ca.crt"  # the Dockerfile copies it when present (and only into the builder stage)
)


class ImageBuildError(RuntimeError):
    """A build step failed; the message carries the tail of its output."""


@dataclass(frozen=True)
class IndexAccess:
    """How a package client inside the build (pip, npm) reaches its index: the host's own settings."""

    ca_bundle: Path | None
    build_args: dict[str, str]


def ensure_base_image(client: docker.DockerClient, workdir: Path) -> str:
    """The debootstrap base, imported once and kept by the engine's data root."""
    try:
        client.images.get(BASE_IMAGE)
        return BASE_IMAGE
    except docker.errors.ImageNotFound:
        pass
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageBuildError("debootstrap is not installed: run deploy/docker/ci-setup.sh")
    root = workdir / "rootfs"
    result = subprocess.run(
        [
            debootstrap,
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            "bookworm",
            str(root),
            DEBIAN_MIRROR,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        output = result.stdout[-2000:] + result.stderr[-2000:]
        raise ImageBuildError(f"debootstrap failed ({result.returncode}): {output}")
    # What an image needs no copy of: package caches, indexes and documentation.
    for leftover in (
        "var/cache/apt/archives",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/man",
    ):
        shutil.rmtree(root / leftover, ignore_errors=True)
    archive = workdir / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname=".")
    repository, tag = BASE_IMAGE.split(":")
    client.api.import_image_from_file(
        str(archive), repository=repository, tag=tag, changes=['CMD ["/bin/bash"]']
    )
    shutil.rmtree(root, ignore_errors=True)
    archive.unlink()
    return BASE_IMAGE


def host_pip_access() -> IndexAccess:
    """The CA bundle and index URLs pip uses on this host; local file:// indexes do not exist in a build."""
    ca = next(
        (
            Path(p)
            for p in (
                os.environ.get("PIP_CERT"),
                os.environ.get("REQUESTS_CA_BUNDLE"),
                "/etc/ssl/certs/ca-certificates.crt",
            )
            if p and Path(p).is_file()
        ),
        None,
    )
    args: dict[str, str] = {}
    for option, variable in (
        ("global.index-url", "PIP_INDEX_URL"),
        ("global.extra-index-url", "PIP_EXTRA_INDEX_URL"),
    ):
        value = os.environ.get(variable) or _pip_config(option)
        urls = [url for url in value.split() if not url.startswith("file:")]
        if urls:
            args[variable] = " ".join(urls)
    if ca is not None:
        args["PIP_CERT"] = f"/src/{CA_BUNDLE_NAME}"
    return IndexAccess(ca, args)


def build_context(
    destination: Path, source: Path = REPO_ROOT, extra: Mapping[str, Path | None] | None = None
) -> Path:
    """A copy of what ``source``'s .dockerignore admits (its `!` lines) with its Dockerfile, plus
    ``extra`` files (name in the context: host path; None: left out), such as the host's CA bundle."""
    destination.mkdir(parents=True, exist_ok=True)
    extra = extra or {}
    for name in ("Dockerfile", ".dockerignore", *allowed_paths(source)):
        origin = source / name
        if name in extra:  # never a copy lying in the source tree
            continue
        if origin.is_dir():
            shutil.copytree(
                origin, destination / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        elif origin.is_file():
            shutil.copy2(origin, destination / name)
    for name, path in extra.items():
        if path is not None:
            shutil.copyfile(path, destination / name)
    return destination


def allowed_paths(source: Path = REPO_ROOT) -> list[str]:
    lines = (source / ".dockerignore").read_text().splitlines()
    return [line[1:].strip().rstrip("/") for line in lines if line.startswith("!")]


def build_image(
    client: docker.DockerClient,
    context: Path,
    tag: str,
    buildargs: Mapping[str, str],
    dockerfile: str = "Dockerfile",
) -> str:
    """`docker build` with the legacy builder (what docker-py drives), on the host network."""
    output: list[str] = []
    for chunk in client.api.build(
        path=str(context),
        dockerfile=dockerfile,
        tag=tag,
        buildargs=dict(buildargs),
        network_mode="host",
        rm=True,
        forcerm=True,
        decode=True,
    ):
        if "stream" in chunk:
            output.append(chunk["stream"])
        if "error" in chunk:
            raise ImageBuildError(
                f"docker build of {tag} failed: {chunk['error']}\n{''.join(output)[-4000:]}"
            )
    return tag


def build_service_image(client: docker.DockerClient) -> str:
    with tempfile.TemporaryDirectory(prefix="entrabot-image-") as tmp:
        base = ensure_base_image(client, Path(tmp))
        pip = host_pip_access()
        context = build_context(Path(tmp) / "context", extra={CA_BUNDLE_NAME: pip.ca_bundle})
        return build_image(client, context, IMAGE, {"BASE_IMAGE": base, **pip.build_args})


def _pip_config(option: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", option],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.stdout.strip() if result.returncode == 0 else ""
