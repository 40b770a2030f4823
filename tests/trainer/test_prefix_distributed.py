"""Shared prompts on two CPU processes (gloo): ranks whose batches differ in shape (one can
share its prompts, the other cannot) still run paired collectives and end with the same
all-reduced gradient, under DDP and FSDP (trainer/prefix.py, from an audit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.ranks import run_ranks

pytestmark = pytest.mark.slow  # two processes train a tiny model: seconds a test

WORKER = Path(__file__).with_name("prefix_worker.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_ranks_with_and_without_a_shared_prompt_agree(tmp_path: Path, kind: str) -> None:
    out = run_ranks(WORKER, kind, str(tmp_path), env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    sums = [json.loads((tmp_path / f"rank{r}.json").read_text())["checksum"] for r in (0, 1)]
    assert sums[0] > 0
    assert sums[0] == pytest.approx(sums[1], rel=1e-6)
