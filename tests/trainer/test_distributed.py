"""DDP on two CPU processes (gloo): prompts are sharded over ranks, the ranks' weights stay
identical after every update, each rank samples with its own seed, ``scale_rewards: batch``
uses every rank's rewards, and a checkpoint restores every rank's RNG and data position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import ServerProcess
from tests.helpers.ranks import run_ranks
from tests.trainer.ddp_worker import FIXED_REWARDS
from trainer.advantages import group_advantages

WORKER = Path(__file__).with_name("ddp_worker.py")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory, server: ServerProcess) -> list[dict]:
    tmp = tmp_path_factory.mktemp("ddp")
    out = run_ranks(WORKER, server.url, str(tmp))
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp / "run" / "metrics.jsonl").exists()  # rank 0 logs
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_two_ranks_stay_identical(reports: list[dict]) -> None:
    rank0, rank1 = reports
    assert rank0["checksum"] == rank1["checksum"]  # the same weights, to the last bit
    assert not set(rank0["prompts"]) & set(rank1["prompts"])  # different prompts on each rank


def test_ranks_sample_with_their_own_seed(reports: list[dict]) -> None:
    a, b = reports[0]["completions"], reports[1]["completions"]
    assert len(a) == len(b) > 0
    pairs = [(x, y) for s, t in zip(a, b, strict=True) for x, y in zip(s, t, strict=False)]
    agreement = sum(x == y for x, y in pairs) / max(len(pairs), 1)
    assert agreement < 0.5, agreement  # one seed everywhere: ~0.9


def test_batch_scaled_advantages_use_every_ranks_rewards(reports: list[dict]) -> None:
    everything = torch.tensor(FIXED_REWARDS[0] + FIXED_REWARDS[1])
    expected, _ = group_advantages(everything, 4, "batch")
    got = torch.tensor(reports[0]["advantages"] + reports[1]["advantages"])
    assert torch.allclose(got, expected, atol=1e-6)


def test_resume_restores_every_ranks_rng_and_position(reports: list[dict]) -> None:
    for report in reports:
        assert report["restored"] == report["after"]
    assert reports[0]["after"]["torch"] != reports[1]["after"]["torch"]
