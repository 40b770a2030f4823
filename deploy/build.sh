#!/usr/bin/env bash
# Builds the images of docker-compose.yml: the reward server, the nginx load balancer and
# the sandbox image the server launches. The project's wheels are built here, on the host,
# and installed in the image with --no-index. Where a registry answers, the images build
# FROM python:3.11-slim / nginx:1.27-alpine / python:3.12-slim; with no registry (this
# project's CI), from Debian bases made with debootstrap from the apt mirror.
#   deploy/build.sh [--offline]          then: docker-compose up -d  (or: docker compose)
set -euo pipefail
cd "$(dirname "$0")/.."
OFFLINE=0
[ "${1:-}" = "--offline" ] && OFFLINE=1
DEPLOY_BASE=verifiable-rewards-deploy-base:bookworm
log=/tmp/vr-deploy-build.log
: >"$log"

bash sandbox/ensure_docker.sh
if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "deploy: installing docker-compose"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose; }; } \
      >>"$log" 2>&1 || { tail -5 "$log" >&2; exit 1; }
  else
    echo "deploy: install Docker Compose (docker compose or docker-compose)" >&2
    exit 1
  fi
fi

# 1. wheels: the project and every server dependency, for this Python (3.11 in the images)
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
mkdir -p deploy/.wheels && rm -f deploy/.wheels/*.whl
echo "deploy: building wheels with Python $pyver"
"$PY" -m pip wheel --quiet --wheel-dir deploy/.wheels ".[server]" pip >>"$log" 2>&1 \
  || { tail -20 "$log" >&2; echo "deploy: pip wheel failed (log: $log)" >&2; exit 1; }

# 2. bases: a registry's, or built offline
if [ "$OFFLINE" = 0 ] && timeout 60 docker pull -q "python:$pyver-slim" >>"$log" 2>&1 \
   && timeout 60 docker pull -q nginx:1.27-alpine >>"$log" 2>&1; then
  export SERVER_BASE="python:$pyver-slim" PROXY_BASE=nginx:1.27-alpine
  bash sandbox/build_image.sh
else
  if [ "$pyver" != 3.11 ]; then
    echo "deploy: offline images run Debian bookworm's Python 3.11; build the wheels with 3.11" >&2
    exit 1
  fi
  bash sandbox/build_image.sh --offline   # also makes the sandbox's own Debian base
  bash scripts/debian_base.sh "$DEPLOY_BASE" python3,nginx-light,wget
  export SERVER_BASE=$DEPLOY_BASE PROXY_BASE=$DEPLOY_BASE
fi

# 3. the compose images (the sandbox image was built above, by its own script)
echo "deploy: building the server and proxy images (FROM $SERVER_BASE, $PROXY_BASE)"
docker build -q --network none -f deploy/server.Dockerfile --build-arg "BASE=$SERVER_BASE" \
  -t verifiable-rewards-server:latest . >>"$log" 2>&1 \
  || { tail -20 "$log" >&2; exit 1; }
docker build -q --network none -f deploy/proxy.Dockerfile --build-arg "BASE=$PROXY_BASE" \
  -t verifiable-rewards-proxy:latest deploy >>"$log" 2>&1 \
  || { tail -20 "$log" >&2; exit 1; }
echo "deploy: images ready; start with: docker-compose up -d   (or: docker compose up -d)"
