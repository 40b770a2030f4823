#!/usr/bin/env bash
# Makes sure a Docker engine answers: starts dockerd in the background when none runs
# (machines without systemd), installing Debian's docker.io first if it is missing.
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
if ! command -v dockerd >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure_docker: installing docker.io"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/tmp/vr-apt.log 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/tmp/vr-apt.log 2>&1; } \
      || { tail -5 /tmp/vr-apt.log >&2; exit 1; }
  else
    echo "ensure_docker: no Docker engine; install Docker (https://docs.docker.com/engine/install/)" >&2
    exit 1
  fi
fi
if [ "$(id -u)" != 0 ]; then
  echo "ensure_docker: the Docker engine is not running and only root can start it here" >&2
  exit 1
fi
echo "ensure_docker: starting dockerd"
nohup dockerd >>/var/log/vr-dockerd.log 2>&1 &
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "ensure_docker: dockerd did not come up; see /var/log/vr-dockerd.log" >&2
exit 1
