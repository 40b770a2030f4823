#!/usr/bin/env bash
# The end-to-end demo: install, start the reward server on loopback, score a batch of
# GSM8K/MATH-style completions the way a GRPO trainer does (groups of G per prompt), print
# the group rewards and advantages, and stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PORT=${PORT:-8765}
.venv/bin/reward-server --port "$PORT" --log-level warning &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
.venv/bin/python examples/score_groups.py --url "http://127.0.0.1:$PORT"
