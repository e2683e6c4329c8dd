# Entrabot Fleet: one image for every replica (and, in docker-compose.yml, for the Graph emulator).
# Written for the legacy builder as well as BuildKit: no --mount, no heredocs, no `# syntax` line.
#
#   docker build -t entrabot-fleet .
#   docker build --build-arg BASE_IMAGE=registry.example/python:3.11-slim-bookworm -t entrabot-fleet .
#
# BASE_IMAGE must provide `python3` (3.11+) with the venv module; both stages use it, so the venv
# built in the first stage runs unchanged in the second.
#
# The default is pinned by digest, so a rebuild gets the same base whatever the tag moved to. The
# digest is the one published for python:3.11.10-slim-bookworm (linux/amd64 + arm64 index); no
# registry is reachable where this file was written, so it is verified at bump time. To bump:
#   docker pull python:3.11-slim-bookworm
#   docker buildx imagetools inspect python:3.11-slim-bookworm   # the index digest (Digest: sha256:...)
# then put the new tag and digest below, rebuild, and run tests/deploy/test_container_image.py.
ARG BASE_IMAGE=python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

FROM ${BASE_IMAGE} AS builder

# Where pip finds packages. Unset, pip uses its defaults. PIP_CERT may name a CA bundle placed in
# the build context as pip-ca.crt (for a TLS-intercepting proxy); the bundle stays in this stage.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_CERT
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src

# Dependencies first, in a layer of their own: they change far less often than the code. Every
# one, the build backend included, comes from requirements.lock and must match its hash; nothing is
# resolved afresh (after changing pyproject.toml's dependencies, regenerate the lock with `make lock`;
# tests/deploy/test_dependency_lock.py fails until then).
COPY requirements.lock pip-ca.cr[t] ./
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: -r requirements.lock

COPY pyproject.toml README.md ./
COPY service ./service
COPY emulator ./emulator
# --no-deps --no-build-isolation: the project itself only, built with the locked setuptools (build
# isolation would fetch an unpinned one). The build tools leave the venv afterwards. The seeds are
# copied out so the emulator can be started with a stable path (/app/seeds/<name>.json).
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
    && /opt/venv/bin/pip uninstall --yes setuptools wheel pip \
    && mkdir -p /app/seeds \
    && find emulator -maxdepth 2 -path 'emulator/seeds/*.json' -exec cp {} /app/seeds/ \; \
    && /opt/venv/bin/entrabot-fleet --help > /dev/null


FROM ${BASE_IMAGE}

# Stamped by CI: --build-arg VERSION=$(entrabot-fleet --version | cut -d" " -f2)
#   --build-arg REVISION=$(git rev-parse HEAD) --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
#   --build-arg SOURCE_URL=<the repository's URL> (the project has no public URL to default to).
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="entrabot-fleet" \
      org.opencontainers.image.description="A horizontally scaled worker fleet that connects an AI agent to Microsoft Teams and mail over MCP." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm"

ARG APP_UID=10001
# The service runs from /opt/venv: the base image's own pip (python:3.11-slim has one) goes.
# The data dir is the only writable path besides /tmp (an emptyDir in Kubernetes, where the root
# filesystem is read-only); it is created here so `docker run` works without a volume too.
RUN if python3 -m pip --version > /dev/null 2>&1; then python3 -m pip uninstall --yes --quiet pip setuptools wheel; fi \
    && groupadd --system --gid "${APP_UID}" entrabot \
    && useradd --system --no-log-init --uid "${APP_UID}" --gid "${APP_UID}" \
        --home-dir /var/lib/entrabot --no-create-home --shell /usr/sbin/nologin entrabot \
    && mkdir -p /var/lib/entrabot/data \
    && chown -R "${APP_UID}:${APP_UID}" /var/lib/entrabot

COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /app /app

ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/entrabot \
    ENTRABOT_HOST=0.0.0.0 \
    ENTRABOT_PORT=8080 \
    ENTRABOT_DATA_DIR=/var/lib/entrabot/data

WORKDIR /app
USER ${APP_UID}:${APP_UID}
EXPOSE 8080

# The slim base has no curl: ask /healthz with the interpreter the service already ships.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["/opt/venv/bin/python", "-c", "import os, urllib.request as r; r.urlopen('http://127.0.0.1:' + os.environ.get('ENTRABOT_PORT', '8080') + '/healthz', timeout=2)"]

ENTRYPOINT ["entrabot-fleet"]
CMD ["serve"]
