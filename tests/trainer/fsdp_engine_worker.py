"""Run under torchrun by test_fsdp_engine.py: two CPU ranks (gloo) train the tiny model with
FSDP2, each rank drawing from a vLLM engine of its own. After every optimizer step each
engine's log-probs of a probe sequence are compared with the sharded policy's forward; each
rank writes what it saw to ``out/rank<N>.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.trainer.conftest import seven_rows  # noqa: E402
from trainer import distributed  # noqa: E402
from trainer.config import GRPOConfig  # noqa: E402
from trainer.models import tiny_model, tiny_tokenizer  # noqa: E402
from trainer.rewards import FunctionScorer  # noqa: E402
from trainer.train import GRPOTrainer, seed_everything  # noqa: E402

PROBE = [2, 5, 6, 7, 8, 9, 10, 11, 12, 13]


def sevens(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
    """Graded, so that a random model's groups differ and every step moves the weights."""
    return [t.count("7") / max(len(t), 1) for t in texts]


@torch.no_grad()
def policy_logprobs(policy: torch.nn.Module) -> list[float]:
    """The probe's log-probs under the policy: a forward of the sharded model (collective:
    every rank runs it)."""
    ids = torch.tensor([PROBE])
    logps = torch.log_softmax(policy(ids).logits[0, :-1].float(), -1)
    return logps.gather(1, ids[0, 1:, None])[:, 0].tolist()


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(out / "run"),
                        max_steps=2, prompts_per_step=2, num_generations=4,
                        generation_chunk=2, max_completion_length=6, learning_rate=3e-2,
                        micro_batch_size=8, progress_bar=False, seed=0, distributed="fsdp",
                        rollout_engine="vllm", vllm_kv_cache_gb=1)
    seed_everything(config.seed)
    tokenizer = tiny_tokenizer()
    trainer = GRPOTrainer(tiny_model(tokenizer, config.seed, heads=2), tokenizer, seven_rows(),
                          config, None, scorer=FunctionScorer(sevens))
    assert trainer.engine is not None
    report: dict[str, Any] = {"sharded": distributed.is_sharded(trainer.model), "steps": []}
    start = policy_logprobs(trainer.policy)
    for _ in range(config.max_steps):
        metrics = trainer.training_step()
        policy = policy_logprobs(trainer.policy)
        engine = trainer.engine.engine.prompt_logprobs(PROBE)
        report["steps"].append({
            "gap": max(abs(a - b) for a, b in zip(engine, policy, strict=True)),
            "moved": max(abs(a - b) for a, b in zip(policy, start, strict=True)),
            "sampling_gap": metrics["sampling/sampling_logp_difference/mean"]})
    trainer.close()
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
