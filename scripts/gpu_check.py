"""The GPU smoke check, called by ``scripts/gpu_check.sh``.

A few bf16 steps of the demo config (``examples/grpo_arithmetic.yaml``), full fine-tuning and
LoRA, with the demo's reward (the last number equals the answer) computed in-process so that
no reward server or Docker engine is needed on the GPU machine. Prints tokens/s, seconds per
step and peak memory for each, then the weight-update ratio: how far three steps at lr 1e-6
move the weights with ``dtype: bfloat16`` as a fraction of how far the same steps move them in
float32 (the goal is ≥ 0.90; bf16 weights with a bf16 AdamW moved them ~3%).

With ``--engine`` (``gpu_check.sh`` passes it once ``.venv-vllm`` holds vLLM), the same full
fine-tuning steps again with ``rollout_engine: vllm``, synchronous and drawing one step ahead
(``max_staleness: 1``): tokens/s, seconds per step, the engine's weight sync and its log-prob
gap to the trainer (``sampling/sampling_logp_difference/mean``: bf16 kernels against the
trainer's; a stale weight would show as a jump).

``--device cpu --model tiny`` runs the same code on the CPU (peak RSS instead of GPU memory),
to test the script where there is no GPU.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from trainer.config import GRPOConfig, load_config
from trainer.models import load_model
from trainer.rewards import FunctionScorer
from trainer.train import GRPOTrainer, seed_everything

ROOT = Path(__file__).resolve().parent.parent
# Run by path, so only bench/ (not a package of the install) needs the checkout on the path;
# ``python -m scripts.gpu_check`` would find the ``scripts`` package that veRL installs.
sys.path.insert(0, str(ROOT))

from bench.bench_trainer import reward_last_number  # noqa: E402

DEMO_CONFIG = ROOT / "examples" / "grpo_arithmetic.yaml"


def demo_config(model: str, device: str, out_dir: str, **overrides: Any) -> GRPOConfig:
    sets = [f"model={model}", f"device={device}", f"output_dir={out_dir}", "progress_bar=false",
            *(f"{k}={json.dumps(v)}" for k, v in overrides.items())]
    return load_config(DEMO_CONFIG, sets)


def digit_share(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
    """For the tiny model, which cannot add: a graded reward, so that its groups differ."""
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def make_trainer(config: GRPOConfig) -> GRPOTrainer:
    from trainer.data import load_rows

    seed_everything(config.seed)
    model, tokenizer = load_model(config.model, torch.float32, config.seed)
    reward = digit_share if config.model == "tiny" else reward_last_number
    return GRPOTrainer(model, tokenizer, load_rows(config.dataset), config, None,
                       scorer=FunctionScorer(reward))


def peak_memory_mb(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # per process, ever


def throughput(model: str, device: str, steps: int, lora_r: int,
               **engine: Any) -> dict[str, float]:
    """``steps`` bf16 steps of the demo config; the first warms up and is not counted.
    ``engine``: the rollout engine's settings (``rollout_engine: vllm``, ...)."""
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as out:
        config = demo_config(model, device, out, dtype="bfloat16", lora_r=lora_r,
                             max_steps=steps, **engine)
        trainer = make_trainer(config)
        metrics = trainer.train()  # the loop itself: drawing ahead runs in train()
    counted = metrics[1:] or metrics
    row = {"tokens_per_s": statistics.median(m["tokens_per_s"] for m in counted),
           "s_per_step": statistics.median(m["time/step"] for m in counted),
           "peak_mb": peak_memory_mb(device)}
    if engine:
        for key in ("time/weight_sync", "sampling/sampling_logp_difference/mean",
                    "sampling/staleness"):
            row[key] = statistics.median(m[key] for m in counted)
    return row


def movement(config: GRPOConfig, steps: int) -> float:
    """Σ|W_after − W_before| over every weight, after ``steps`` steps (the measure of
    tests/trainer/test_precision.py)."""
    trainer = make_trainer(config)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    for _ in range(steps):
        trainer.training_step()
    trainer.scorer.close()
    return sum(float((p.detach() - b).abs().sum())
               for p, b in zip(trainer.policy.parameters(), before, strict=True))


def update_ratio(model: str, device: str, steps: int = 3, lr: float = 1e-6) -> float:
    """Movement of a bf16 run over that of the float32 run: same init, seed and data.
    NaN when the float32 run did not move (no group had different rewards)."""
    with tempfile.TemporaryDirectory() as out:
        moved = {dtype: movement(demo_config(model, device, out, dtype=dtype,
                                             learning_rate=lr, max_steps=steps), steps)
                 for dtype in ("float32", "bfloat16")}
    return moved["bfloat16"] / moved["float32"] if moved["float32"] > 0 else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--model", default="smollm2", help="'smollm2' (the demo) or 'tiny'")
    ap.add_argument("--steps", type=int, default=4, help="steps per throughput run (first one "
                    "is a warm-up)")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--engine", action="store_true", help="also the steps with the vLLM "
                    "engine drawing (needs bash scripts/setup_vllm.sh)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to torch; use --device cpu to test the "
              "script's logic", file=sys.stderr)
        return 2
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    memory = "peak GPU MB" if args.device == "cuda" else "peak RSS MB"
    print(f"gpu_check: {args.model} on {where}, torch {torch.__version__}, bf16, "
          f"{args.steps} steps of {DEMO_CONFIG.relative_to(ROOT)}")
    results: dict[str, Any] = {"device": where, "model": args.model}
    print(f"{'':12} {'tokens/s':>9} {'s/step':>8} {memory:>12}")
    for name, r in (("full", 0), (f"LoRA r={args.lora_r}", args.lora_r)):
        row = throughput(args.model, args.device, args.steps, r)
        results[name] = row
        print(f"{name:12} {row['tokens_per_s']:9.1f} {row['s_per_step']:8.2f} "
              f"{row['peak_mb']:12.0f}", flush=True)
    if args.engine:
        for name, ahead in (("vllm", 0), ("vllm ahead 1", 1)):
            row = throughput(args.model, args.device, args.steps, 0, rollout_engine="vllm",
                             max_staleness=ahead)
            results[name] = row
            print(f"{name:12} {row['tokens_per_s']:9.1f} {row['s_per_step']:8.2f} "
                  f"{row['peak_mb']:12.0f}   weight sync {row['time/weight_sync']:.2f} s, "
                  f"log-prob gap {row['sampling/sampling_logp_difference/mean']:.2e}, "
                  f"staleness {row['sampling/staleness']:.0f}", flush=True)
    ratio = update_ratio(args.model, args.device)
    results["update_ratio"] = ratio
    verdict = ("ok" if ratio >= 0.9 else "not measurable: the float32 run did not move"
               if ratio != ratio else "TOO SMALL (the goal is >= 0.90)")
    print(f"weight-update ratio, bf16 / float32, 3 steps at lr 1e-6: {ratio:.3f} ({verdict})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if ratio >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
