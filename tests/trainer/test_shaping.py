"""DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13): the formula at its boundaries,
veRL's form of it, its config, and the term as a training step adds it to the reward."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import seven_rows
from trainer.config import ConfigError, GRPOConfig, OverlongBuffer, load_config
from trainer.models import load_model
from trainer.rewards import FunctionScorer, ScoredBatch
from trainer.shaping import overlong_penalty
from trainer.train import GRPOTrainer, seed_everything

# L_max = 20, L_cache = 8: free up to 12 tokens, then 1/8 per token, -1 at 20 and beyond
BOUNDARIES = [(0, 0.0), (11, 0.0), (12, 0.0), (13, -0.125), (16, -0.5), (19, -0.875),
              (20, -1.0), (21, -1.0), (500, -1.0)]


@pytest.mark.parametrize(("length", "want"), BOUNDARIES)
def test_the_penalty_at_its_boundaries(length: int, want: float) -> None:
    assert overlong_penalty(length, max_length=20, buffer_len=8) == pytest.approx(want)


def test_it_is_verls_form_within_the_limit() -> None:
    """veRL (reward_manager/dapo.py): min(-(|y| - (L_max - L_cache)) / L_cache * factor, 0);
    its lengths never pass L_max, its response limit."""
    L_max, L_cache = 64, 16
    for length in range(L_max + 1):
        verl = min(-(length - (L_max - L_cache)) / L_cache, 0)
        assert overlong_penalty(length, L_max, L_cache) == pytest.approx(verl)


def test_a_buffer_as_long_as_the_limit_penalises_from_the_first_token() -> None:
    assert overlong_penalty(0, 4, 4) == 0.0 and overlong_penalty(1, 4, 4) == -0.25
    with pytest.raises(ValueError, match="L_cache"):
        overlong_penalty(3, 4, 5)


def test_the_config_checks_the_lengths() -> None:
    config = GRPOConfig(max_completion_length=32, overlong_buffer=OverlongBuffer(len=8))
    assert config.overlong_max_length == 32  # L_max defaults to the generation limit
    with pytest.raises(ConfigError, match="overlong_buffer.len .* exceeds L_max"):
        load_config(None, ["max_completion_length=32", "overlong_buffer={len: 40}"])
    with pytest.raises(ConfigError, match="no completion could reach it"):
        load_config(None, ["max_completion_length=32", "overlong_buffer={len: 4, "
                           "max_length: 64}"])
    with pytest.raises(ConfigError, match="overlong_buffer.len"):
        load_config(None, ["overlong_buffer={len: 0}"])


def test_the_term_is_added_but_decides_neither_accuracy_nor_scorability() -> None:
    batch = ScoredBatch([1.0, math.nan, 0.0], {"math": [1.0, None, 0.0]}, [True, False, False])
    shaped = batch.with_term("overlong", 0.5, [-1.0, -1.0, 0.0])
    assert shaped.rewards[0] == 0.5 and math.isnan(shaped.rewards[1]) and shaped.rewards[2] == 0
    assert shaped.correct == [True, False, False]
    assert shaped.per_verifier == {"math": [1.0, None, 0.0], "overlong": [-1.0, -1.0, 0.0]}
    with pytest.raises(ValueError, match="already named 'math'"):
        batch.with_term("math", 1.0, [0.0] * 3)


def _trainer(tmp_path: Path, factor: float) -> GRPOTrainer:
    # L_max = 6 tokens with a buffer of 4 over a tiny random model that rarely stops: lengths
    # spread over the buffer, so the term alone separates a group's completions
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path),
                        num_generations=4, max_completion_length=6, prompts_per_step=2,
                        generation_chunk=1, micro_batch_size=8, progress_bar=False,
                        device="cpu", learning_rate=1e-3,
                        overlong_buffer=OverlongBuffer(len=4, penalty_factor=factor))
    seed_everything(0)
    model, tokenizer = load_model("tiny", torch.float32, 0)
    scorer = FunctionScorer(lambda texts, rows: [1.0] * len(texts), name="constant")
    return GRPOTrainer(model, tokenizer, seven_rows(), config, None, scorer=scorer)


def test_each_completions_penalty_is_its_token_count_through_the_formula(tmp_path: Path
                                                                         ) -> None:
    trainer = _trainer(tmp_path, factor=0.5)
    try:
        rollout, scored, *_ = trainer.sampler.sample(trainer.stream.take(2))
    finally:
        trainer.scorer.close()
    lengths = rollout.completion_mask.sum(1).tolist()
    want = [overlong_penalty(n, 6, 4) for n in lengths]
    assert scored.per_verifier["overlong"] == pytest.approx(want)
    assert scored.rewards == pytest.approx([1.0 + 0.5 * w for w in want])
    assert scored.correct == [True] * 8  # the verifier's verdict, not the length's


def test_a_training_step_logs_the_term_and_learns_from_it(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, factor=1.0)
    try:
        metrics = trainer.training_step()
    finally:
        trainer.scorer.close()
    assert metrics["rewards/constant/mean"] == 1.0
    assert metrics["rewards/overlong/mean"] < 0
    assert metrics["reward"] == pytest.approx(1.0 + metrics["rewards/overlong/mean"])
    # the verifier gives every completion 1: only the length term makes advantages
    assert metrics["frac_reward_zero_std"] < 1.0 and metrics["advantages/max"] > 0
    assert metrics["grad_norm"] > 0
