"""Lockstep: our trainer and TRL 1.16's GRPOTrainer drawing the same samples, each from its
own weights, over a whole run.

The race (``bench_learning``) leaves each trainer its own random stream, so two runs on the
same prompts differ by their draws as much as by their trainers, and a gap between the curves
of a dozen seeds cannot say which. Here both trainers sample through one ``Sampler``: each
prompt's G completions come from HF ``generate`` on that prompt alone (no padding, no other
rows), at the race's temperature, with torch's generator seeded by (seed, step, prompt), from
the trainer's weights at that step. Everything else is each trainer's own: the prompts it
takes, how it masks and decodes the completions, the reward it asks for (``reward_demo``
with its own cut flags), the advantages, the loss, the optimizer, and the same held-out
evaluation as the race. Two trainers whose steps agree hold the same weights after every
step, so they draw the same completions again, step after step; where they part, the step,
the completions that differ and a fingerprint of the weights say when and by how much.

    python -m bench.bench_lockstep --seed 0 --publish     # SmolLM2, the demo's 14 steps
    python -m bench.bench_lockstep --model tiny --steps 3 --eval-samples 8   # a quick try

Writes ``bench_lockstep_seed<N>`` (date, commit, machine, figures) through ``bench/record.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.bench_learning import RESULTS, ROOT, child_result, run_ours, run_trl
from bench.record import commit, record

DIRECTIONS = 4  # random directions of the weights' fingerprint


class Sampler:
    """One seeded draw per prompt from the weights it is handed, recorded: the same weights
    and step give the same completions, whichever trainer asks."""

    def __init__(self, seed: int, num_generations: int, max_new_tokens: int,
                 temperature: float, eos_ids: list[int], pad_id: int) -> None:
        self.seed, self.G = seed, num_generations
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.eos_ids, self.pad_id = eos_ids, pad_id
        self.draws: list[list[list[int]]] = []  # per step, each completion's tokens
        self.fingerprints: list[list[float]] = []  # per step, the weights it drew from
        self.fingerprint_cost: list[tuple[float, float]] = []  # per step: CPU, wall seconds
        self.model: Any = None

    def __call__(self, model: Any, prompts: list[list[int]]) -> list[list[int]]:
        import torch
        from transformers import GenerationConfig

        step = len(self.draws)
        self.model = model  # the trained model itself: after the run, its last weights
        cpu, wall = time.process_time(), time.perf_counter()
        self.fingerprints.append(fingerprint(model))
        self.fingerprint_cost.append((time.process_time() - cpu, time.perf_counter() - wall))
        config = GenerationConfig(do_sample=True, temperature=self.temperature, top_k=0,
                                  top_p=1.0, min_p=None, repetition_penalty=1.0,
                                  max_new_tokens=self.max_new_tokens,
                                  eos_token_id=self.eos_ids, pad_token_id=self.pad_id)
        was_training = model.training
        model.eval()
        out: list[list[int]] = []
        for g in range(0, len(prompts), self.G):
            group = prompts[g : g + self.G]
            if any(p != group[0] for p in group):
                raise ValueError("the trainer did not pass each prompt G times in a row")
            torch.manual_seed(self.seed * 1_000_003 + step * 1_009 + g // self.G)
            ids = torch.tensor([group[0]] * self.G)
            with torch.no_grad():
                new = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                     generation_config=config)[:, ids.shape[1]:]
            out += [through_eos(row, self.eos_ids) for row in new.tolist()]
        model.train(was_training)
        self.draws.append(out)
        return out


def through_eos(tokens: list[int], eos_ids: list[int]) -> list[int]:
    """A row's tokens up to and including its first EOS (``generate`` pads after it)."""
    for i, t in enumerate(tokens):
        if t in eos_ids:
            return tokens[: i + 1]
    return tokens


def fingerprint(model: Any) -> list[float]:
    """The weights projected on ``DIRECTIONS`` fixed random directions (each tensor's
    seeded by its place): two models' fingerprints differ by about as much as their weights
    do, scaled alike, without holding either's copy."""
    import torch

    sums = [0.0] * DIRECTIONS
    with torch.no_grad():
        for i, p in enumerate(dict(model.named_parameters()).values()):
            gen = torch.Generator().manual_seed(i)
            for d in range(DIRECTIONS):
                direction = torch.randn(p.shape, generator=gen, dtype=torch.float64)
                # in float64: the steps' moves are ~1e-6 of the weights, below float32's
                # rounding of a sum over a tensor
                sums[d] += float((p.detach().double() * direction).sum())
    return sums


def child(which: str, model_name: str, steps: int, eval_every: int, eval_samples: int,
          seed: int, save_to: Path | None = None) -> dict[str, Any]:
    """One trainer's run through the shared sampler: its held-out points, draws and
    fingerprints (of the weights each step drew from). ``save_to``: where its trained model
    goes (a folder any ``--model`` option takes), to check a sampler on trained weights."""
    import torch

    from bench.bench_learning import our_config
    from trainer.data import load_rows
    from trainer.models import load_model, prepare_tokenizer
    from trainer.rollout import eos_token_ids

    out_dir = RESULTS / "tmp" / f"lockstep-{which}-{model_name}"
    config = our_config(model_name, steps, out_dir, seed)
    model, tokenizer = load_model(model_name, torch.float32, config.seed)
    prepare_tokenizer(tokenizer)
    # what ends a completion: every id our rollout stops at (TRL's generate stops at the
    # model's generation_config ids; both are the same here, and a difference would show)
    sampler = Sampler(seed, config.num_generations, config.max_completion_length,
                      config.temperature, eos_token_ids(model, tokenizer),
                      tokenizer.pad_token_id)
    eval_rows = load_rows("arithmetic-eval")[:eval_samples]
    if which == "ours":
        points, _ = run_ours(model_name, steps, eval_every, eval_rows, out_dir, seed,
                             draw=sampler)
    else:
        points = run_trl(model_name, steps, eval_every, eval_rows, out_dir, seed,
                         draw=sampler)
    if save_to is not None:
        sampler.model.save_pretrained(save_to)
        tokenizer.save_pretrained(save_to)
    for p in points:  # the fingerprints are the bench's, not the trainer's: off its clock
        p["seconds"] -= sum(c for c, _ in sampler.fingerprint_cost[: p["step"]])
        p["wall_seconds"] -= sum(w for _, w in sampler.fingerprint_cost[: p["step"]])
    return {"points": points, "draws": sampler.draws, "fingerprints": sampler.fingerprints,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def compare(ours: dict[str, Any], trl: dict[str, Any]) -> list[dict[str, Any]]:
    """Per step: how many completions the two drew alike, and how far apart the weights they
    drew from were, against how far TRL's had moved from the start."""
    rows = []
    start = trl["fingerprints"][0]
    for step, (a, b, fa, fb) in enumerate(zip(ours["draws"], trl["draws"],
                                              ours["fingerprints"], trl["fingerprints"],
                                              strict=True)):
        apart = sum((x - y) ** 2 for x, y in zip(fa, fb, strict=True)) ** 0.5
        moved = sum((x - y) ** 2 for x, y in zip(fb, start, strict=True)) ** 0.5
        rows.append({"step": step + 1, "same_completions": sum(x == y for x, y in zip(
            a, b, strict=True)), "completions": len(b), "weights_apart": apart,
            "weights_moved": moved})
    return rows


def spawn(args: argparse.Namespace, which: str) -> subprocess.Popen:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "bench.bench_lockstep", "--child", which, "--model",
         args.model, "--steps", str(args.steps), "--eval-every", str(args.eval_every),
         "--eval-samples", str(args.eval_samples), "--seed", str(args.seed),
         *(["--save-to", str(args.save_to)] if args.save_to and which == "ours" else [])],
        stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--eval-samples", type=int, default=128)
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/bench_lockstep_seed<N>.json")
    ap.add_argument("--save-to", type=Path, help="save our trainer's trained model there")
    ap.add_argument("--child", choices=("ours", "trl"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(1)
        result = child(args.child, args.model, args.steps, args.eval_every,
                       args.eval_samples, args.seed, args.save_to)
        print("RESULT " + json.dumps(result))
        return
    measured_on = commit()
    procs = {which: spawn(args, which) for which in ("trl", "ours")}  # both at once
    results = {which: child_result(which, proc, bench="bench_lockstep")
               for which, proc in procs.items()}
    steps = compare(results["ours"], results["trl"])
    for row in steps:
        print(f"step {row['step']:3d}  same completions {row['same_completions']:3d}/"
              f"{row['completions']}  weights apart {row['weights_apart']:.3g} "
              f"(moved {row['weights_moved']:.3g})")
    for p, q in zip(results["ours"]["points"], results["trl"]["points"], strict=True):
        print(f"step {p['step']:3d}  held-out accuracy ours {p['accuracy']:.3f}  "
              f"TRL {q['accuracy']:.3f}")
    figures = {"steps": steps,
               **{which: {"points": r["points"], "peak_mb": r["peak_mb"]}
                  for which, r in results.items()}}
    settings = {"model": args.model, "steps": args.steps, "seed": args.seed,
                "eval_every": args.eval_every, "eval_samples": args.eval_samples}
    path = record(f"bench_lockstep_seed{args.seed}", figures, settings,
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
