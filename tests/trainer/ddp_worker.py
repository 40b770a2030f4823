"""Run under torchrun by test_distributed.py: two CPU ranks (gloo) train a tiny model for a
few steps, seeded as the CLI seeds them (one seed for all); each rank writes a JSON report:
a checksum of its weights, its prompts and completions, its advantages of fixed rewards under
``scale_rewards: batch``, and whether a resume restored its own RNG and data position."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from reward_server.client import RewardClient  # noqa: E402
from tests.trainer.conftest import seven_rows  # noqa: E402
from trainer import checkpoint  # noqa: E402
from trainer.config import GRPOConfig  # noqa: E402
from trainer.models import load_model  # noqa: E402
from trainer.train import GRPOTrainer, seed_everything  # noqa: E402

# per-rank rewards for the scale_rewards check (2 groups of G = 4 on each rank)
FIXED_REWARDS = {0: [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0],
                 1: [0.0, 5.0, 0.0, 5.0, 2.0, 2.0, 2.0, 3.0]}


def make_trainer(out: Path, client: RewardClient) -> GRPOTrainer:
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(out / "run"),
                        max_steps=3, prompts_per_step=2, num_generations=4,
                        generation_chunk=1, max_completion_length=6, learning_rate=3e-3,
                        micro_batch_size=3, progress_bar=False, seed=0, scale_rewards="batch")
    seed_everything(config.seed)  # as trainer.cli does: the same seed on every rank
    model, tokenizer = load_model("tiny", torch.float32, config.seed)
    return GRPOTrainer(model, tokenizer, seven_rows(), config, client)


def main() -> None:
    url, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with RewardClient(url) as client:
        trainer = make_trainer(out, client)
        seen = [row["prompt"] for row in trainer.stream.take(2)]
        trainer.stream.position = 0
        completions: list[str] = []
        submit = trainer.scorer.submit

        def recording_submit(texts, rows, group_size=1, truncated=None):  # type: ignore[no-untyped-def]
            completions.extend(texts)
            return submit(texts, rows, group_size, truncated)

        trainer.scorer.submit = recording_submit  # type: ignore[method-assign]
        trainer.train()
        # right after the final checkpoint: the next draws of this rank
        after = {"torch": torch.rand(4).tolist(), "python": random.random(),
                 "position": trainer.stream.position}
        advantages, _ = trainer.advantages(torch.tensor(FIXED_REWARDS[rank]))

        resumed = make_trainer(out, client)
        resumed.resume(checkpoint.latest_checkpoint(out / "run"))
        restored = {"torch": torch.rand(4).tolist(), "python": random.random(),
                    "position": resumed.stream.position}
    checksum = sum(float(p.double().sum()) for p in trainer.policy.parameters())
    report = {"checksum": repr(checksum), "prompts": seen, "completions": completions,
              "advantages": advantages.tolist(), "after": after, "restored": restored}
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
