"""torchrun --nproc-per-node 2 prefix_worker.py KIND OUT: one update through a
GRPOTrainer wrapped in KIND (ddp or fsdp), on a batch whose shape differs per rank: rank 0's
completions are 1 token (nothing to share), rank 1's are 3 (a shared prompt). Writes each
rank's gradient checksum, which must agree: the ranks all-reduced the same gradients, and no
collective was left unpaired (that would hang, and the test's timeout fails it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.config import GRPOConfig
from trainer.models import load_model
from trainer.rewards import FunctionScorer
from trainer.train import GRPOTrainer, UpdateBatch, seed_everything

G, P = 4, 6


def main() -> None:
    kind, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    seed_everything(0)
    model, tokenizer = load_model("tiny", torch.float32, 0)
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(out / "run"),
                        prompts_per_step=2, num_generations=G, micro_batch_size=2 * G,
                        distributed=kind, progress_bar=False)
    trainer = GRPOTrainer(model, tokenizer, [{"prompt": "x", "answer": "1"}], config, None,
                          scorer=FunctionScorer(lambda texts, rows: [0.0] * len(texts)))
    g = torch.Generator().manual_seed(100 + rank)
    T = 1 if rank == 0 else 3
    ids = torch.cat([torch.randint(5, 40, (2, P), generator=g).repeat_interleave(G, 0),
                     torch.randint(5, 40, (2 * G, T), generator=g)], 1)
    batch = UpdateBatch(ids, torch.ones_like(ids), T, torch.ones(2 * G, T),
                        torch.randn(2 * G, generator=g))
    trainer.policy.zero_grad(set_to_none=True)
    trainer.accumulate_gradients(batch, trainer.normalizer(batch.loss_mask))
    grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
             for p in trainer.policy.parameters() if p.grad is not None]
    checksum = float(sum(gr.double().abs().sum() for gr in grads))
    (out / f"rank{rank}.json").write_text(json.dumps({"checksum": checksum}))
    trainer.scorer.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
