#!/usr/bin/env bash
# Makes a Debian bookworm base image without a registry: debootstrap (minbase, plus the given
# packages) from the Debian mirror apt already uses, then `docker import`. Installs
# debootstrap first when missing (as root). Used for the sandbox's and the deploy stack's
# offline bases.
#   scripts/debian_base.sh TAG PACKAGE[,PACKAGE...]
set -euo pipefail
TAG=$1
PACKAGES=$2
log=/tmp/vr-debootstrap-$(echo "$TAG" | tr -c "A-Za-z0-9.\n-" _).log

if docker image inspect "$TAG" >/dev/null 2>&1; then
  exit 0
fi
if ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "debian_base: installing debootstrap"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }; } \
      >/tmp/vr-apt.log 2>&1 || { tail -5 /tmp/vr-apt.log >&2; exit 1; }
  else
    echo "debian_base: no registry and no debootstrap; run: apt-get install -y debootstrap" >&2
    exit 1
  fi
fi
# the Debian mirror apt already uses (not security, not third-party repositories)
mirror=$( (grep -rhoE '^(deb|URIs:) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list \
           /etc/apt/sources.list.d/ 2>/dev/null || true) | awk '{print $2}' | head -n1)
mirror=${mirror:-http://deb.debian.org/debian}
rootfs=$(mktemp -d /tmp/vr-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "debian_base: no registry; debootstrap bookworm ($PACKAGES) from $mirror (a few minutes)"
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$mirror" \
  >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import - "$TAG" >/dev/null
echo "debian_base: imported $TAG"
