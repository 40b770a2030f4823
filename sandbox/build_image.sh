#!/usr/bin/env bash
# Builds the sandbox image (default tag verifiable-rewards-sandbox:latest), starting the
# Docker engine if it is not running. Uses python:3.12-slim when a registry answers;
# otherwise builds a Debian base offline with debootstrap from the apt mirror this machine
# already uses, imports it, and builds the Dockerfile on top of it. One image holds every
# language's toolchain (PACKAGES, Debian bookworm's).
#   sandbox/build_image.sh [--tag NAME] [--offline] [--force]
set -euo pipefail
cd "$(dirname "$0")"
TAG=verifiable-rewards-sandbox:latest
# The toolchains of sandbox/languages.py (python3 is the base's, or the harness's)
PACKAGES="g++ gcc openjdk-17-jdk-headless nodejs golang-go rustc"
OFFLINE=0
FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=$2; shift 2 ;;
    --offline) OFFLINE=1; shift ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "build_image: unknown argument $1" >&2; exit 2 ;;
  esac
done

bash ./ensure_docker.sh

hash=$( (echo "$PACKAGES"; cat Dockerfile harness/*.py toolchains/*.py) | sha256sum | cut -c1-12)
# the base's tag names its package list, so a new list makes a new base
BASE_TAG=verifiable-rewards-sandbox-base:bookworm-$(echo "python3 $PACKAGES" | sha256sum | cut -c1-8)
if [ "$FORCE" = 0 ] && [ "$(docker image inspect -f '{{ index .Config.Labels "vr.hash" }}' "$TAG" 2>/dev/null)" = "$hash" ]; then
  echo "build_image: $TAG is up to date"
  exit 0
fi

if [ "$OFFLINE" = 0 ] && timeout 60 docker pull -q python:3.12-slim >/dev/null 2>&1; then
  docker build -q --label "vr.hash=$hash" --build-arg "PACKAGES=$PACKAGES" -t "$TAG" . \
    >/tmp/vr-build.log 2>&1 \
    || { tail -20 /tmp/vr-build.log >&2; exit 1; }
  echo "build_image: built $TAG from python:3.12-slim"
  exit 0
fi

bash ../scripts/debian_base.sh "$BASE_TAG" "python3,${PACKAGES// /,}"
docker build -q --label "vr.hash=$hash" --build-arg "BASE=$BASE_TAG" \
  --build-arg INSTALL_PACKAGES=0 -t "$TAG" . >/tmp/vr-build.log 2>&1 \
  || { tail -20 /tmp/vr-build.log >&2; exit 1; }
echo "build_image: built $TAG offline from $BASE_TAG"
