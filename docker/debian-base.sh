#!/usr/bin/env bash
# Builds a Debian bookworm image with Python 3.11 from Debian's own packages and imports it into the
# local Docker engine, for hosts that reach Debian's archive but no container registry:
#   sudo bash docker/debian-base.sh                     # -> warppipe-base:bookworm-py311
#   docker build -f docker/Dockerfile --build-arg BASE=warppipe-base:bookworm-py311 ...
# Needs root, debootstrap and a running Docker engine.
set -euo pipefail
TAG=${1:-warppipe-base:bookworm-py311}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-dev,python-is-python3,ca-certificates \
    bookworm "$root" "$MIRROR"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import - "$TAG"
echo "imported $TAG"
