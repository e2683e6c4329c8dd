#!/usr/bin/env bash
# Installs what the deployment tests use from Debian, when it is missing (safe to run again):
#   docker.io      dockerd for the Docker tests in tests/deploy (started there on a private socket)
#   debootstrap    their base image (no registry is reachable to pull one)
#   prometheus     promtool, to check deploy/prometheus/prometheus.yml and unit-test alerts.yml
#   docker-compose to check docker-compose.yml and bring it up (tests/deploy/test_compose_up.py)
#   tmux, iproute2 the real Claude Code tests: an interactive session in tmux, a loopback-only namespace (ip)
# Needs root (or sudo). Where an init system runs services, installing docker.io also starts a daemon on
# /var/run/docker.sock; the tests use their own (and Azurite stays the npm build unless
# ENTRABOT_AZURITE=testcontainers says otherwise).
set -euo pipefail

declare -A package_of=([dockerd]=docker.io [debootstrap]=debootstrap [docker-compose]=docker-compose [promtool]=prometheus [tmux]=tmux [ip]=iproute2)
missing=()
for command in dockerd debootstrap docker-compose promtool tmux ip; do
  command -v "$command" >/dev/null 2>&1 || missing+=("${package_of[$command]}")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "ci-setup: docker.io, debootstrap, docker-compose, prometheus, tmux and iproute2 are already installed"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "ci-setup: not root and no sudo; not installing ${missing[*]} (the tests that need them skip, saying why)" >&2; exit 0; }
  sudo=(sudo)
fi

echo "ci-setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
with_recommends=()
for package in "${missing[@]}"; do
  [ "$package" = prometheus ] || with_recommends+=("$package")
done
if [ "${#with_recommends[@]}" -gt 0 ]; then
  "${sudo[@]}" apt-get install -y -q "${with_recommends[@]}"
fi
if [[ " ${missing[*]} " == *" prometheus "* ]]; then
  # Only promtool is used; the recommended exporters are not.
  "${sudo[@]}" apt-get install -y -q --no-install-recommends prometheus
fi
