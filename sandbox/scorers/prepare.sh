#!/usr/bin/env bash
# Stages the scorers for the sandbox image into DEST (build_image.sh's context/scorers):
#   lib/   the packages of requirements.txt, installed for the image's python3 (DEST/lib);
#   src/   the verifier modules that call them (reward_server/verifiers/reasoning_gym's guard,
#          corrections and library), under empty package stubs: nothing else of the server;
#   requirements.txt, for the Dockerfile's online install.
#   sandbox/scorers/prepare.sh DEST PYTHON_VERSION (3.11: Debian bookworm's; other: online)
# Offline the image has no network, so lib/ is filled here, on the host, where PyPI answers:
# wheels for the image's Python and platform, and a wheel built here for a package that ships
# none (which needs this host's python3 to be the image's version, as on bookworm). The
# install is cached by requirements.txt's hash (a rebuild for a harness change reuses it).
# Online (python:3.12-slim, with network) lib/ stays empty and the Docker build installs.
# Never fails the build: without PyPI the image is built without scorers, and the server says
# so on every reasoning_gym item.
set -uo pipefail
cd "$(dirname "$0")"
DEST=$1
PYVER=$2
mkdir -p "$DEST/lib" "$DEST/src/reward_server/verifiers/reasoning_gym"
cp requirements.txt "$DEST/requirements.txt"
for pkg in "$DEST/src/reward_server" "$DEST/src/reward_server/verifiers" \
           "$DEST/src/reward_server/verifiers/reasoning_gym"; do
  : > "$pkg/__init__.py"
done
cp ../../reward_server/verifiers/reasoning_gym/{guard,corrections,library}.py \
   "$DEST/src/reward_server/verifiers/reasoning_gym/"

[ "$PYVER" = 3.11 ] || exit 0  # online: the Dockerfile installs

# a host python3 of the image's version, with pip: the project's venv, else the system's
python=
for candidate in ../../.venv/bin/python python3.11 python3; do
  if "$candidate" -c 'import sys, pip; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "prepare_scorers: no Python 3.11 with pip on this host: the image gets no scorers" >&2
  exit 0
fi
key=$(cat requirements.txt <(uname -m) | sha256sum | cut -c1-12)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/verifiable-rewards/scorers-py311-$key
if [ ! -f "$cache/.complete" ]; then
  echo "prepare_scorers: installing requirements.txt for Python 3.11 (once: cached in $cache)"
  rm -rf "$cache" && mkdir -p "$cache/wheels" "$cache/lib"
  arch=$(uname -m)
  platforms=(--platform "manylinux_2_28_$arch" --platform "manylinux_2_17_$arch"
             --platform "manylinux2014_$arch" --platform "linux_$arch")
  log=$cache/pip.log
  ok=1
  while read -r req; do
    case "$req" in ''|'#'*) continue ;; esac
    "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --implementation cp "${platforms[@]}" -d "$cache/wheels" "$req" >>"$log" 2>&1 \
      || "$python" -m pip wheel -q --no-deps -w "$cache/wheels" "$req" >>"$log" 2>&1 \
      || { echo "prepare_scorers: cannot get $req (see $log)" >&2; ok=0; break; }
  done < requirements.txt
  if [ "$ok" = 1 ] && "$python" -m pip install -q --no-deps --no-index --no-compile \
      --find-links "$cache/wheels" --only-binary=:all: --python-version 3.11 \
      --implementation cp "${platforms[@]}" --target "$cache/lib" -r requirements.txt \
      >>"$log" 2>&1; then
    rm -rf "$cache/wheels" "$cache/lib/bin"
    touch "$cache/.complete"
  else
    echo "prepare_scorers: the image gets no scorers (pip failed; see $log)" >&2
    exit 0
  fi
fi
cp -a "$cache/lib/." "$DEST/lib/"
