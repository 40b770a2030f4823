"""Run under torchrun by test_distributed.py: two CPU ranks (gloo) train a tiny model for a
few steps; each rank writes a checksum of its weights."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from reward_server.client import RewardClient  # noqa: E402
from tests.trainer.conftest import seven_rows  # noqa: E402
from trainer.config import GRPOConfig  # noqa: E402
from trainer.models import load_model  # noqa: E402
from trainer.train import GRPOTrainer, seed_everything  # noqa: E402


def main() -> None:
    url, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(out / "run"),
                        max_steps=3, prompts_per_step=2, num_generations=4,
                        generation_chunk=1, max_completion_length=6, learning_rate=3e-3,
                        micro_batch_size=3, progress_bar=False, seed=0)
    seed_everything(config.seed + rank)  # ranks sample differently; weights start equal
    model, tokenizer = load_model("tiny", torch.float32, config.seed)
    with RewardClient(url) as client:
        trainer = GRPOTrainer(model, tokenizer, seven_rows(), config, client)
        seen = [row["prompt"] for row in trainer.stream.take(2)]
        trainer.stream.position = 0
        trainer.train()
    checksum = sum(float(p.double().sum()) for p in trainer.policy.parameters())
    (out / f"rank{rank}.txt").write_text(f"{checksum!r}\n" + "\n".join(seen))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
