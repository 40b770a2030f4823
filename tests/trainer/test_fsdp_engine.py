"""FSDP2 with the vLLM engine: each rank's engine holds the whole policy after every
optimizer step, gathered from the shards (two CPU ranks, gloo, an engine process each)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.ranks import run_ranks
from trainer.engine.client import DEFAULT_PYTHON

pytestmark = pytest.mark.slow  # two ranks and two engine processes

WORKER = Path(__file__).with_name("fsdp_engine_worker.py")


def test_each_ranks_engine_holds_the_gathered_policy_after_every_step(tmp_path: Path) -> None:
    if not DEFAULT_PYTHON.exists():
        message = "no vLLM environment: bash scripts/setup_vllm.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    out = run_ranks(WORKER, str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert report["sharded"]
        assert len(report["steps"]) == 2
        for step in report["steps"]:
            assert step["gap"] < 1e-4, report  # the engine's log-probs are the policy's
            assert step["sampling_gap"] < 1e-4, report  # and it drew from the policy itself
        assert report["steps"][-1]["moved"] > 1e-2, report  # the policy did move
