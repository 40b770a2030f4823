"""FSDP2 (``distributed: fsdp``) on two CPU processes (gloo): the same weights as DDP after two
steps from the same start, each rank holding only its shard, and a checkpoint written under
FSDP resumes (weights and optimizer state back into the shards, and training goes on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers.ranks import run_ranks

pytestmark = pytest.mark.slow  # two processes train a tiny model: seconds a test

WORKER = Path(__file__).with_name("fsdp_worker.py")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("fsdp")
    out = run_ranks(WORKER, str(tmp))
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp


def test_fsdp_and_ddp_give_the_same_weights(run: Path) -> None:
    ddp, fsdp = torch.load(run / "ddp.pt"), torch.load(run / "fsdp.pt")
    start = torch.load(run / "start.pt")
    assert ddp.keys() == fsdp.keys()
    for name in ddp:
        assert not torch.equal(ddp[name], start[name]), name  # two steps moved every tensor
        # all-reduce (DDP) and reduce-scatter (FSDP) sum in different orders: float32 noise
        torch.testing.assert_close(fsdp[name], ddp[name], atol=1e-5, rtol=1e-4)


def test_each_rank_holds_a_shard(run: Path) -> None:
    for rank in (0, 1):
        report = json.loads((run / f"rank{rank}.json").read_text())
        assert report["fsdp/sharded"] and not report["ddp/sharded"]
        assert report["fsdp/local_numel"] < 0.6 * report["ddp/local_numel"]


def test_fsdp_checkpoint_resumes(run: Path) -> None:
    saved, resumed = torch.load(run / "fsdp.pt"), torch.load(run / "resumed.pt")
    for name in saved:
        assert torch.equal(resumed[name], saved[name]), name
    for rank in (0, 1):
        report = json.loads((run / f"rank{rank}.json").read_text())
        assert report["resumed/step"] == 2 and report["resumed/final_step"] == 3
