#!/usr/bin/env bash
# System tools some tests use, from Debian's packages: promtool (checks /metrics and the Prometheus
# config), docker.io and debootstrap (the container image test). Idempotent and quick once installed.
# Without root (or without apt), nothing is installed and those tests skip, saying why.
set -euo pipefail

want=()
command -v promtool >/dev/null 2>&1 || want+=(prometheus)
command -v dockerd >/dev/null 2>&1 || want+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || want+=(debootstrap)
[ ${#want[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: not root or no apt-get; skipping ${want[*]} (the tests that need them will skip)" >&2
  exit 0
fi
echo "system-deps: installing ${want[*]} from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends keeps prometheus to the binaries; the server is not started (no systemd here).
apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
