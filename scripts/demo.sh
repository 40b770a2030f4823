#!/usr/bin/env bash
# The end-to-end demo: install, build the sandbox image, start the reward server (math + code
# sandbox) on loopback, score a few GRPO groups through it, then GRPO-train the embedded
# SmolLM2-135M-Instruct on generated additions against the server, with a live progress bar.
# Leaves runs/demo/{metrics.jsonl,curves.png,checkpoint-*}.
#   bash scripts/demo.sh [grpo-train options, e.g. --set max_steps=10]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash sandbox/build_image.sh || echo "demo: no sandbox image; code items will be unscorable" >&2
PORT=${PORT:-8765}
export OPENBLAS_NUM_THREADS=1
.venv/bin/reward-server --port "$PORT" --log-level warning &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
URL="http://127.0.0.1:$PORT"
.venv/bin/python examples/score_groups.py --url "$URL"
rm -rf runs/demo
.venv/bin/grpo-train --config examples/grpo_arithmetic.yaml --reward-url "$URL" "$@"
.venv/bin/python - <<'PY'
import json
records = [json.loads(l) for l in open("runs/demo/metrics.jsonl")]
evals = [r for r in records if "eval/accuracy" in r]
print(f"\nheld-out accuracy (greedy, {len(evals)} evaluations): "
      f"step {evals[0]['step']}: {evals[0]['eval/accuracy']:.3f} -> "
      f"step {evals[-1]['step']}: {evals[-1]['eval/accuracy']:.3f}")
print("reward curve: runs/demo/curves.png; checkpoints: runs/demo/checkpoint-*")
PY
