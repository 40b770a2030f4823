#!/usr/bin/env bash
# The GPU smoke check: on a CUDA machine, a few bf16 steps of the demo config, full
# fine-tuning and LoRA; prints tokens/s, peak GPU memory and the bf16/float32 weight-update
# ratio. Exit code 0 when the ratio is >= 0.90, 1 when it is not, 2 when there is no GPU.
# CI never runs it. Needs a CUDA build of torch: TORCH_SPEC="torch==2.13.0 --index-url
# https://download.pytorch.org/whl/cu128" bash scripts/setup.sh (a fresh .venv).
# Then the same steps with the vLLM engine drawing (synchronous, and one step ahead), after
# installing vLLM's CUDA build into .venv-vllm (the [vllm] extra; GPU_CHECK_VLLM=0 skips it).
#   bash scripts/gpu_check.sh [--steps 4] [--lora-r 16] [--json out.json]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! .venv/bin/python -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null
then
  echo "gpu_check: no CUDA device visible to torch ($(.venv/bin/python -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'no torch')); nothing measured" >&2
  exit 2
fi
export OPENBLAS_NUM_THREADS=1
engine=()
if [ "${GPU_CHECK_VLLM:-1}" != 0 ]; then
  if VLLM_EXTRA=vllm bash scripts/setup_vllm.sh; then
    engine=(--engine)
  else
    echo "gpu_check: vLLM did not install (above); the engine rows are skipped" >&2
  fi
fi
exec .venv/bin/python scripts/gpu_check.py --device cuda "${engine[@]}" "$@"
