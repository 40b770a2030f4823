"""Does a batch the vLLM engine draws teach the policy what a batch the HF path draws does?
From the demo's initial weights, R replicates: in each, the same trainer draws one step's
batch (the demo's 4 prompts × 8, the same prompts for both) with its engine and with HF
``generate``, and computes the GRPO gradient of each. No update is taken: at a learning rate
of 1e-30 the step moves only the weights that are exactly 0, by about 1e-30 (the largest
change is recorded), so every replicate starts from the same policy.

What it compares: the batches' rewards and shapes, paired by replicate; the expected
gradient μ of each sampler (its squared norm, and the two's inner product, each estimated
without bias from pairs of different replicates, with a bootstrap interval over replicates);
and each batch's alignment with the pooled mean gradient of the other replicates, for the
gradient g and for sign(g), the direction of Adam's first step. Equal samplers give a ratio
of 1 and a paired alignment difference within its standard error; an engine batch that
teaches less would show as a ratio below 1 or a negative difference.

    python -m bench.bench_engine_signal [--replicates 40] [--coordinates 8000000] [--publish]

The gradients are kept on a random subset of the parameters' coordinates (inner products on
it estimate the full ones, scaled). Writes JSON through ``bench/record.py``
(``bench_engine_signal``). Needs ``bash scripts/setup_vllm.sh``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from typing import Any

import torch

from bench.bench_trainer import reward_demo
from bench.record import commit, record

SAMPLERS = ("vllm", "hf")
BATCH_FIGURES = {"reward": "reward", "zero_std_group_share": "frac_reward_zero_std",
                 "truncated_share": "truncated_fraction", "mean_length": "completion_length"}


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    """Means of ``a`` and ``b`` and their paired difference with its standard error."""
    diff = [x - y for x, y in zip(a, b, strict=True)]
    return {"vllm": round(statistics.fmean(a), 4), "hf": round(statistics.fmean(b), 4),
            "difference": round(statistics.fmean(diff), 4),
            "standard_error": round(statistics.stdev(diff) / len(diff) ** 0.5, 4)}


def mean_gradient_moments(gram: torch.Tensor, reps: list[int], R: int) -> tuple[float, ...]:
    """(|μ_vllm|², |μ_hf|², μ_vllm·μ_hf) from the Gram matrix of the 2R gradients (rows
    0..R-1 the engine's, R..2R-1 HF's), over replicates ``reps``: each a mean of inner
    products of gradients from different replicates, which is unbiased (a replicate's two
    batches share their prompts, so a pair from one replicate is left out)."""
    def mean(offset_a: int, offset_b: int) -> float:
        a = torch.tensor([offset_a + r for r in reps])
        b = torch.tensor([offset_b + r for r in reps])
        block = gram[a][:, b]
        different = torch.tensor(reps).unsqueeze(1) != torch.tensor(reps).unsqueeze(0)
        return float(block[different].mean())

    return mean(0, 0), mean(R, R), mean(0, R)


def alignment(grads: dict[str, torch.Tensor], f: Callable[[torch.Tensor], torch.Tensor]
              ) -> dict[str, float]:
    """Each batch's f(g) against the mean gradient of every other replicate's batches
    (both samplers'), paired by replicate."""
    a, b = grads["vllm"], grads["hf"]
    total = a.sum(0) + b.sum(0)
    R = len(a)
    scores: dict[str, list[float]] = {"vllm": [], "hf": []}
    for r in range(R):
        others = (total - a[r] - b[r]) / (2 * R - 2)
        scores["vllm"].append(float(f(a[r]) @ others))
        scores["hf"].append(float(f(b[r]) @ others))
    out = paired(scores["vllm"], scores["hf"])
    out["t"] = round(out["difference"] / out["standard_error"], 2) if out["standard_error"] else 0.0
    return out


def gradient_figures(grads: dict[str, torch.Tensor], boots: int = 400) -> dict[str, Any]:
    a, b = grads["vllm"].double(), grads["hf"].double()
    R = len(a)
    x = torch.cat([a, b])
    gram = x @ x.T
    ee, hh, eh = mean_gradient_moments(gram, list(range(R)), R)
    generator = torch.Generator().manual_seed(0)
    ratios, inners = [], []
    for _ in range(boots):
        reps = torch.randint(0, R, (R,), generator=generator).tolist()
        e_, h_, eh_ = mean_gradient_moments(gram, reps, R)
        ratios.append(e_ / h_)
        inners.append(eh_ / h_)

    def interval(values: list[float]) -> list[float]:
        values = sorted(values)
        return [round(values[int(0.025 * len(values))], 3),
                round(values[int(0.975 * len(values)) - 1], 3)]

    return {"mean_gradient": {
                "norm2_ratio_vllm_over_hf": round(ee / hh, 3),
                "norm2_ratio_interval_95": interval(ratios),
                "inner_over_hf_norm2": round(eh / hh, 3),
                "inner_over_hf_norm2_interval_95": interval(inners),
                "cosine": round(eh / (ee * hh) ** 0.5, 3) if ee > 0 and hh > 0 else None},
            "alignment_gradient": alignment({"vllm": a, "hf": b}, lambda g: g),
            "alignment_adam_first_step": alignment({"vllm": a, "hf": b}, torch.sign)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--replicates", type=int, default=40)
    parser.add_argument("--coordinates", type=int, default=8_000_000,
                        help="gradient coordinates kept per batch (4 bytes each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()

    from bench.bench_learning import our_config
    from trainer.data import load_rows
    from trainer.models import load_model, prepare_tokenizer
    from trainer.rewards import FunctionScorer
    from trainer.train import GRPOTrainer, seed_everything

    torch.set_num_threads(1)
    # the gradient is measured, not taken: no clipping, and a step that moves no weight
    config = our_config(args.model, args.replicates, "/tmp/bench_engine_signal", args.seed,
                        "vllm").model_copy(update={"learning_rate": 1e-30,
                                                   "max_grad_norm": 1e30})
    seed_everything(args.seed)
    model, tokenizer = load_model(args.model, torch.float32, args.seed)
    prepare_tokenizer(tokenizer)
    trainer = GRPOTrainer(model, tokenizer, load_rows(config.dataset), config, None,
                          scorer=FunctionScorer(reward_demo))
    params = [p for p in trainer.policy.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    total = sum(p.numel() for p in params)
    keep = torch.randint(0, total, (args.coordinates,),
                         generator=torch.Generator().manual_seed(args.seed))
    engine = trainer.sampler.engine
    grads: dict[str, list[torch.Tensor]] = {s: [] for s in SAMPLERS}
    batches: dict[str, dict[str, list[float]]] = {s: {k: [] for k in [*BATCH_FIGURES,
                                                                      "grad_norm"]}
                                                  for s in SAMPLERS}
    for r in range(args.replicates):
        for k, sampler in enumerate(SAMPLERS):
            trainer.stream.position = r * config.prompts_per_step  # the same prompts
            trainer.sampler.engine = engine if sampler == "vllm" else None
            torch.manual_seed(1_000_003 * (k + 1) + r)  # each draw its own stream
            metrics = trainer.training_step()
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            grads[sampler].append(flat[keep].clone())
            for name, key in BATCH_FIGURES.items():
                batches[sampler][name].append(float(metrics[key]))
            batches[sampler]["grad_norm"].append(float(flat.norm()))
        print(f"replicate {r + 1}/{args.replicates}", flush=True)
    trainer.sampler.engine = engine
    trainer.close()
    moved = max(float((p.detach() - q).abs().max()) for p, q in zip(params, before,
                                                                    strict=True))
    figures = {"batches": {name: paired(batches["vllm"][name], batches["hf"][name])
                           for name in batches["vllm"]},
               **gradient_figures({s: torch.stack(g) for s, g in grads.items()}),
               "largest_weight_change": moved}
    settings = {"model": args.model, "replicates": args.replicates,
                "coordinates": args.coordinates, "of_parameters": total, "seed": args.seed,
                "prompts_per_step": config.prompts_per_step,
                "num_generations": config.num_generations,
                "temperature": config.temperature,
                "max_completion_length": config.max_completion_length}
    print(json.dumps(figures, indent=2))
    path = record("bench_engine_signal", figures, settings, args.publish, measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
