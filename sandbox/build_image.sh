#!/usr/bin/env bash
# Builds the sandbox image (default tag verifiable-rewards-sandbox:latest), starting the
# Docker engine if it is not running. Uses python:3.12-slim when a registry answers;
# otherwise builds a Debian base offline with debootstrap from the apt mirror this machine
# already uses, imports it, and builds the Dockerfile on top of it. One image holds every
# language's toolchain (PACKAGES, Debian bookworm's).
#   sandbox/build_image.sh [--tag NAME] [--offline] [--force] [--testlib PATH]
# --testlib PATH (or TESTLIB_H=PATH): bake the operator's testlib.h into the image as
# /usr/local/include/testlib.h, where a checker's #include "testlib.h" finds it. Give it at
# every build: a build without it makes an image without it.
set -euo pipefail
cd "$(dirname "$0")"
TAG=verifiable-rewards-sandbox:latest
# Not shipped: Codeforces' testlib.h is the operator's to supply (and vet), offline
TESTLIB_H=${TESTLIB_H:-}
# The toolchains of sandbox/languages.py (python3 is the base's, or the harness's)
PACKAGES="g++ gcc openjdk-17-jdk-headless nodejs golang-go rustc"
OFFLINE=0
FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=$2; shift 2 ;;
    --offline) OFFLINE=1; shift ;;
    --force) FORCE=1; shift ;;
    --testlib) TESTLIB_H=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "build_image: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ -n "$TESTLIB_H" ] && [ ! -f "$TESTLIB_H" ]; then
  echo "build_image: testlib.h not found: $TESTLIB_H" >&2
  exit 2
fi

bash ./ensure_docker.sh

# the scorers: their pinned packages, and the verifier modules the image carries
SCORER_SOURCES="../reward_server/verifiers/reasoning_gym/guard.py
  ../reward_server/verifiers/reasoning_gym/corrections.py
  ../reward_server/verifiers/reasoning_gym/library.py"
hash=$( (echo "$PACKAGES"; cat Dockerfile harness/*.py toolchains/*.py scorers/requirements.txt \
           scorers/prepare.sh $SCORER_SOURCES
         if [ -n "$TESTLIB_H" ]; then cat "$TESTLIB_H"; fi) | sha256sum | cut -c1-12)
# the base's tag names its package list, so a new list makes a new base
BASE_TAG=verifiable-rewards-sandbox-base:bookworm-$(echo "python3 $PACKAGES" | sha256sum | cut -c1-8)
if [ "$FORCE" = 0 ] && [ "$(docker image inspect -f '{{ index .Config.Labels "vr.hash" }}' "$TAG" 2>/dev/null)" = "$hash" ]; then
  echo "build_image: $TAG is up to date"
  exit 0
fi

# The build context: what the Dockerfile copies, and include/ with the operator's headers
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/harness" "$context/toolchains" "$context/include"
cp Dockerfile "$context/"
cp harness/*.py "$context/harness/"
cp toolchains/*.py "$context/toolchains/"
touch "$context/include/.keep"
if [ -n "$TESTLIB_H" ]; then
  cp "$TESTLIB_H" "$context/include/testlib.h"
  chmod 644 "$context/include/testlib.h"
fi

if [ "$OFFLINE" = 0 ] && timeout 60 docker pull -q python:3.12-slim >/dev/null 2>&1; then
  bash scorers/prepare.sh "$context/scorers" 3.12  # installed by the Docker build
  docker build -q --label "vr.hash=$hash" --build-arg "PACKAGES=$PACKAGES" -t "$TAG" "$context" \
    >/tmp/vr-build.log 2>&1 \
    || { tail -20 /tmp/vr-build.log >&2; exit 1; }
  echo "build_image: built $TAG from python:3.12-slim"
  exit 0
fi

bash ../scripts/debian_base.sh "$BASE_TAG" "python3,${PACKAGES// /,}"
bash scorers/prepare.sh "$context/scorers" 3.11  # Debian bookworm's python3
docker build -q --label "vr.hash=$hash" --build-arg "BASE=$BASE_TAG" \
  --build-arg INSTALL_PACKAGES=0 -t "$TAG" "$context" >/tmp/vr-build.log 2>&1 \
  || { tail -20 /tmp/vr-build.log >&2; exit 1; }
echo "build_image: built $TAG offline from $BASE_TAG"
