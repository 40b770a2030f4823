#!/usr/bin/env bash
# The test suite: installs what it needs (Python packages, the Docker engine and the sandbox
# image), then runs ruff and pytest (extra arguments go to pytest).
#   bash scripts/test.sh          the full suite (root, Docker, gVisor, the vLLM engine; about
#                                 75 minutes on 2 cores; it stops starting tests after 4800 s)
#   bash scripts/test.sh --fast   the fast tier: units and pure functions, no server, no
#                                 engine, no training (under a minute; no root needed)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fast" ]; then
  shift
  bash scripts/setup.sh
  .venv/bin/ruff check .
  exec .venv/bin/python -m pytest -q -m "not server and not docker and not slow" "$@"
fi
bash scripts/setup.sh
if ! bash sandbox/build_image.sh; then
  if [ "${CI:-}" = "true" ]; then
    echo "test: the sandbox image could not be built; CI needs the Docker engine" >&2
    exit 1
  fi
  echo "test: no Docker engine or sandbox image: the sandbox tests will be skipped" >&2
fi
# gVisor for the sandbox tests that also run under it (on a second engine the tests start)
if ! bash sandbox/ensure_runsc.sh >/dev/null; then
  if [ "${CI:-}" = "true" ]; then
    echo "test: runsc (gVisor) could not be installed; CI runs the sandbox tests under it" >&2
    exit 1
  fi
  echo "test: no runsc: the sandbox tests under gVisor will be skipped" >&2
fi
# vLLM's own environment, for the rollout engine's tests (tests/trainer/test_vllm_engine.py)
if ! bash scripts/setup_vllm.sh; then
  if [ "${CI:-}" = "true" ]; then
    echo "test: vLLM's environment could not be installed; CI runs the engine's tests" >&2
    exit 1
  fi
  echo "test: no vLLM environment: the engine's tests will be skipped" >&2
fi
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q "$@"
