"""Gradient accumulation: micro-batch sizes 1, 4 and 16 give the gradient of the whole batch,
for every loss type (the normaliser counts the whole batch: trainer/loss.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.conftest import seven_rows
from trainer.config import GRPOConfig
from trainer.logprobs import completion_logps
from trainer.models import load_model
from trainer.rewards import FunctionScorer
from trainer.train import GRPOTrainer, UpdateBatch, seed_everything

pytestmark = pytest.mark.slow  # trains tiny models: seconds a test

N, P, T = 16, 5, 7


def trainer_for(tmp_path: Path, micro_batch_size: int, **options: Any) -> GRPOTrainer:
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path),
                        num_generations=4, max_completion_length=T,
                        micro_batch_size=micro_batch_size, progress_bar=False, device="cpu",
                        **options)
    seed_everything(0)
    model, tokenizer = load_model("tiny", torch.float32, 0)
    return GRPOTrainer(model, tokenizer, seven_rows(), config, None,
                       scorer=FunctionScorer(lambda texts, rows: [0.0] * len(texts)))


def batch_for(trainer: GRPOTrainer) -> UpdateBatch:
    """16 sequences with left-padded prompts and completions of different lengths (some
    empty after masking), ratios away from 1 (clipping happens) and a reference apart."""
    g = torch.Generator().manual_seed(0)
    vocab = len(trainer.tokenizer)
    ids = torch.randint(4, vocab, (N, P + T), generator=g)
    attn = torch.ones(N, P + T, dtype=torch.long)
    for i in range(N):
        attn[i, : i % 3] = 0  # left padding
        ids[i, : i % 3] = trainer.tokenizer.pad_token_id
    lengths = torch.tensor([(i * 5) % (T + 1) for i in range(N)])  # 0 .. T
    loss_mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).float()
    attn[:, P:] = loss_mask.long()
    with torch.no_grad():
        now = completion_logps(trainer.policy, ids, attn, T)
    return UpdateBatch(ids, attn, T, loss_mask,
                       advantages=torch.randn(N, generator=g),
                       old_logps=now + 0.3 * torch.randn(N, T, generator=g),
                       ref_logps=now + 0.2 * torch.randn(N, T, generator=g))


@pytest.mark.parametrize("options", [
    {"loss_type": "grpo"}, {"loss_type": "bnpo"}, {"loss_type": "dr_grpo"},
    {"loss_type": "dapo"}, {"loss_type": "dapo", "beta": 0.04},
    {"importance_sampling_level": "sequence"},
], ids=["grpo", "bnpo", "dr_grpo", "dapo", "dapo-kl", "gspo"])
def test_micro_batch_size_does_not_change_the_gradient(tmp_path: Path, options: dict) -> None:
    grads, losses = {}, {}
    for mb in (1, 4, 16):
        trainer = trainer_for(tmp_path / str(mb), mb, **options)
        batch = batch_for(trainer)
        if not options.get("beta"):
            batch.ref_logps = None
        trainer.policy.zero_grad(set_to_none=True)
        losses[mb], _ = trainer.accumulate_gradients(batch, trainer.normalizer(batch.loss_mask))
        grads[mb] = torch.cat([p.grad.flatten() for p in trainer.policy.parameters()])
    scale = grads[16].abs().max()
    assert scale > 0
    for mb in (1, 4):
        assert torch.allclose(grads[mb], grads[16], rtol=1e-4, atol=1e-5 * float(scale)), mb
        assert losses[mb] == pytest.approx(losses[16], rel=1e-5, abs=1e-7)
