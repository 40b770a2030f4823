"""Run under torchrun by test_fsdp.py: two CPU ranks (gloo) train the tiny model for two
steps with DDP, then again from the same start with FSDP2; then an FSDP run resumes from the
FSDP checkpoint. Rank 0 writes the whole weights of each run (gathered) to ``out``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_model_state_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.trainer.conftest import seven_rows  # noqa: E402
from trainer import checkpoint, distributed  # noqa: E402
from trainer.config import GRPOConfig  # noqa: E402
from trainer.models import load_model  # noqa: E402
from trainer.rewards import FunctionScorer  # noqa: E402
from trainer.train import GRPOTrainer, seed_everything  # noqa: E402


def sevens(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
    """Graded, so that a random model's groups differ and every step moves the weights."""
    return [t.count("7") / max(len(t), 1) for t in texts]


def make_trainer(run: Path, kind: str, max_steps: int = 2) -> GRPOTrainer:
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(run),
                        max_steps=max_steps, prompts_per_step=2, num_generations=4,
                        generation_chunk=1, max_completion_length=6, learning_rate=3e-3,
                        micro_batch_size=3, progress_bar=False, seed=0, distributed=kind)
    seed_everything(config.seed)
    model, tokenizer = load_model("tiny", torch.float32, config.seed)
    return GRPOTrainer(model, tokenizer, seven_rows(), config, None,
                       scorer=FunctionScorer(sevens))


def full_weights(trainer: GRPOTrainer) -> dict[str, torch.Tensor]:
    """Whole tensors on rank 0 (collective). The weights only: asking for the optimizer
    state of a fresh optimizer would initialise it (one zero-gradient step)."""
    return get_model_state_dict(trainer.model, options=distributed.FULL)


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results: dict[str, Any] = {}
    for kind in ("ddp", "fsdp"):
        trainer = make_trainer(out / kind, kind)
        results[f"{kind}/sharded"] = distributed.is_sharded(trainer.model)
        if kind == "ddp":
            start = full_weights(trainer)
            if rank == 0:
                torch.save(start, out / "start.pt")
        history = trainer.train()
        results[f"{kind}/history"] = [{k: h[k] for k in ("loss", "grad_norm", "reward")}
                                      for h in history]
        weights = full_weights(trainer)
        if rank == 0:
            torch.save(weights, out / f"{kind}.pt")
        # what this rank holds: all of it under DDP, its shard under FSDP
        results[f"{kind}/local_numel"] = sum(
            (p.to_local() if hasattr(p, "to_local") else p).numel()
            for p in trainer.policy.parameters())

    resumed = make_trainer(out / "fsdp", "fsdp", max_steps=3)
    saved = checkpoint.latest_checkpoint(out / "fsdp")
    resumed.resume(saved)
    results["resumed/step"] = resumed.step
    weights = full_weights(resumed)
    if rank == 0:
        torch.save(weights, out / "resumed.pt")
    resumed.train()  # one more step from the restored shards and optimizer state
    results["resumed/final_step"] = resumed.step
    (out / f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
