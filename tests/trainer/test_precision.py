"""bf16 compute over float32 master weights: small updates are not rounded away, and
checkpoints hold the float32 weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from tests.trainer.conftest import seven_rows
from trainer.config import GRPOConfig
from trainer.models import load_model
from trainer.rewards import FunctionScorer
from trainer.train import GRPOTrainer, seed_everything

pytestmark = pytest.mark.slow  # trains tiny models: seconds a test


def vowel_share(texts: list[str], rows: list[dict[str, Any]]) -> list[float | None]:
    """A reward that varies between completions of a random model: every group teaches."""
    return [sum(ch in "aeiou" for ch in t) / max(len(t), 1) for t in texts]


def make(tmp_path: Path, dtype: str, **overrides: Any) -> GRPOTrainer:
    options: dict[str, Any] = dict(
        model="tiny", dataset="unused", output_dir=str(tmp_path / dtype), max_steps=3,
        prompts_per_step=2, num_generations=4, max_completion_length=6, learning_rate=1e-6,
        micro_batch_size=32, progress_bar=False, dtype=dtype, device="cpu")
    config = GRPOConfig(**{**options, **overrides})
    seed_everything(config.seed)
    model, tokenizer = load_model("tiny", torch.float32, config.seed)
    return GRPOTrainer(model, tokenizer, seven_rows(), config, None,
                       scorer=FunctionScorer(vowel_share))


def weight_movement(trainer: GRPOTrainer, steps: int) -> float:
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    for _ in range(steps):
        trainer.training_step()
    return sum(float((p.detach() - b).abs().sum())
               for p, b in zip(trainer.policy.parameters(), before, strict=True))


def test_bf16_moves_the_weights_as_float32_does(tmp_path: Path) -> None:
    full = weight_movement(make(tmp_path, "float32"), 3)
    mixed_trainer = make(tmp_path, "bfloat16")
    mixed = weight_movement(mixed_trainer, 3)
    assert full > 0
    assert mixed >= 0.9 * full, mixed / full  # bf16 weights: ~3%
    assert all(p.dtype == torch.float32 for p in mixed_trainer.policy.parameters())
    states = [s for s in mixed_trainer.optimizer.state.values() if "exp_avg" in s]
    assert states and all(s["exp_avg_sq"].dtype == torch.float32 for s in states)


def test_bf16_runs_the_forward_in_bf16(tmp_path: Path) -> None:
    trainer = make(tmp_path, "bfloat16")
    seen: list[torch.dtype] = []
    layer = trainer.policy.model.layers[0].mlp.down_proj
    handle = layer.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    trainer.training_step()
    handle.remove()
    assert seen and set(seen) == {torch.bfloat16}


def test_checkpoints_hold_float32_master_weights(tmp_path: Path) -> None:
    trainer = make(tmp_path, "bfloat16", max_steps=1)
    trainer.training_step()
    folder = trainer.save()
    assert folder is not None
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}  # noqa: SIM118
    assert dtypes == {torch.float32}
    resumed = make(tmp_path / "again", "bfloat16", max_steps=1)
    resumed.resume(folder)
    for p, q in zip(trainer.policy.parameters(), resumed.policy.parameters(), strict=True):
        assert torch.equal(p, q)
