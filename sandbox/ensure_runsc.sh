#!/usr/bin/env bash
# Makes sure gVisor's runsc is installed, for REWARD_SERVER_SANDBOX_RUNTIME=runsc and for the
# tests that run the sandbox under it: Debian's package (bookworm and later) through apt,
# which works offline from the machine's mirror. Prints runsc's path. Registering it with an
# engine is the operator's step (README, "Isolation, layer by layer").
set -euo pipefail
if ! command -v runsc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure_runsc: installing runsc (gVisor)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq -o DPkg::Lock::Timeout=300 runsc >/tmp/vr-apt-runsc.log 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 \
           && apt-get install -y -qq -o DPkg::Lock::Timeout=300 runsc >/tmp/vr-apt-runsc.log 2>&1; } \
      || { tail -5 /tmp/vr-apt-runsc.log >&2; exit 1; }
  else
    echo "ensure_runsc: runsc (gVisor) is not installed: apt-get install runsc, or see" \
         "https://gvisor.dev/docs/user_guide/install/" >&2
    exit 1
  fi
fi
command -v runsc
