#!/bin/sh
# Starts as root only to find the group that owns the mounted Docker socket, then runs the
# server as the unprivileged "reward" user with that group added (the socket's group id
# differs from host to host, so it cannot be baked into the image).
set -eu
if [ "$(id -u)" = 0 ]; then
  groups=10002
  socket=${DOCKER_HOST:-unix:///var/run/docker.sock}
  socket=${socket#unix://}
  if [ -S "$socket" ]; then
    groups="$groups,$(stat -c %g "$socket")"
  fi
  exec setpriv --reuid=10002 --regid=10002 --groups="$groups" --inh-caps=-all -- "$@"
fi
exec "$@"
