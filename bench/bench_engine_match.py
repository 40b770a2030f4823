"""Do the vLLM engine and the trainer's HF path draw from the same distribution at the demo's
settings? Both draw P prompts × G samples of the arithmetic task (the demo's temperature and
completion length, through the chat template) from the same float32 policy, R rounds each,
and the bench compares what the loss and the reward see: the mean reward (what the demo
pays: ``bench_trainer.reward_demo``), the completion length, the share cut at the length
limit, and the most common first tokens. A difference beyond the standard errors would be a sampling defect
(a hidden penalty, a stop id missed, a wrong temperature); equal figures leave any
difference in learning to the random streams.

It also checks each sampler token by token (``calibration``): the policy re-reads every
drawn completion, and at each drawn position the token that was drawn is compared with
what softmax(logits/T) of its prefix expects: how often it is EOS, how often the most likely
token, and its log-prob against minus the entropy. Summed over every position each is a
martingale, so under exact sampling its z-score is N(0, 1) whatever the prompts; a sampler
drawing at another temperature, or stopping too often or too rarely, shows as |z| of many.

    python -m bench.bench_engine_match [--prompts 64] [--g 8] [--rounds 4] [--publish]

Writes JSON (date, commit, machine, figures) through ``bench/record.py``
(``bench_engine_match``). Needs ``bash scripts/setup_vllm.sh``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import torch

from bench.bench_trainer import reward_demo
from bench.record import commit, record


def summary(tokenizer: Any, rollouts: list[Any], g: int) -> dict[str, Any]:
    """What the loss and the reward see of ``rollouts``, with the reward's standard error;
    and within each group of ``g``, what GRPO learns from: how many completions differ, and
    how often all g rewards agree (a group with no advantage)."""
    rewards: list[float] = []
    lengths: list[int] = []
    truncated: list[float] = []
    firsts: dict[int, int] = {}
    distinct: list[int] = []
    for rollout in rollouts:
        texts = rollout.texts
        distinct += [len(set(texts[i : i + g])) for i in range(0, len(texts), g)]
        rewards += reward_demo(rollout.texts, rollout.rows, rollout.truncated.tolist())
        lengths += rollout.completion_mask.sum(1).tolist()
        truncated += rollout.truncated.float().tolist()
        for token in rollout.completion_ids[:, 0].tolist():
            firsts[token] = firsts.get(token, 0) + 1
    n = len(rewards)
    common = sorted(firsts.items(), key=lambda kv: -kv[1])[:5]
    groups = [rewards[i : i + g] for i in range(0, n, g)]
    return {"samples": n, "mean_reward": round(sum(rewards) / n, 4),
            "reward_standard_error": round(statistics.pstdev(rewards) / n ** 0.5, 4),
            "groups": len(groups),
            "zero_std_group_share": round(sum(len(set(r)) == 1 for r in groups)
                                          / len(groups), 4),
            "mean_group_reward_std": round(statistics.fmean(statistics.pstdev(r)
                                                            for r in groups), 4),
            "distinct_completions_per_group": round(statistics.fmean(distinct), 3),
            "mean_length": round(sum(lengths) / n, 3),
            "truncated_share": round(sum(truncated) / n, 4),
            "first_tokens": {tokenizer.decode([t]): c for t, c in common}}


@torch.no_grad()
def calibration(model: Any, rollouts: list[Any], temperature: float, eos_ids: list[int],
                chunk: int = 32) -> dict[str, dict[str, float]]:
    """Per drawn token, what was drawn against what π/T of its prefix expects (the
    module's docstring): {statistic: observed, expected, z}, summed over every drawn
    position of ``rollouts``."""
    from trainer.logprobs import completion_logits

    sums = {k: [0.0, 0.0, 0.0] for k in ("eos", "argmax", "log_prob")}  # observed, E, Var
    eos = torch.tensor(eos_ids)
    for rollout in rollouts:
        ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], 1)
        attention = torch.cat([rollout.prompt_mask, rollout.completion_mask], 1)
        width = rollout.completion_ids.shape[1]
        for i in range(0, ids.shape[0], chunk):
            logp = (completion_logits(model, ids[i : i + chunk], attention[i : i + chunk],
                                      width).float() / temperature).log_softmax(-1)
            p = logp.exp()  # (B, T, V)
            drawn = rollout.completion_ids[i : i + chunk]
            mask = rollout.completion_mask[i : i + chunk].bool()
            drawn_logp = logp.gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
            top, top_id = p.max(-1)
            stop = p[..., eos_ids].sum(-1)  # any EOS id ends a completion
            entropy = -(p * logp).sum(-1)
            second = (p * logp * logp).sum(-1)
            for key, observed, mean, var in (
                    ("eos", torch.isin(drawn, eos).float(), stop,
                     stop * (1 - stop)),
                    ("argmax", (drawn == top_id).float(), top, top * (1 - top)),
                    ("log_prob", drawn_logp, -entropy, second - entropy * entropy)):
                sums[key][0] += float(observed[mask].sum())
                sums[key][1] += float(mean[mask].sum())
                sums[key][2] += float(var[mask].sum())
    return {key: {"observed": round(o, 2), "expected": round(e, 2),
                  "z": round((o - e) / v ** 0.5, 2) if v > 0 else 0.0}
            for key, (o, e, v) in sums.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--g", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--as-trainer", action="store_true",
                        help="start and call the engine as the trainer does (its settings "
                             "from the demo config; one call per step's prompts) rather than "
                             "one engine call per round")
    parser.add_argument("--skip-hf", action="store_true", help="the engine's draws alone")
    parser.add_argument("--name", default="bench_engine_match")
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()

    from bench.bench_learning import DEMO_CONFIG
    from trainer.config import load_config
    from trainer.data import load_rows
    from trainer.engine.client import EngineSettings, VLLMEngine
    from trainer.engine.sampling import generate_on_engine
    from trainer.engine.weights import policy_weights
    from trainer.models import load_model, prepare_tokenizer
    from trainer.rollout import Sampling, eos_token_ids, format_prompt, generate
    from trainer.seeds import DrawSeeds

    demo = load_config(DEMO_CONFIG, [f"model={args.model}"])
    torch.manual_seed(demo.seed)
    model, tokenizer = load_model(args.model, torch.float32, demo.seed)
    prepare_tokenizer(tokenizer)
    model.eval()
    rows = load_rows(demo.dataset)[: args.prompts]
    prompts = [format_prompt(r, tokenizer, "prompt", None, True) for r in rows]
    sampling = Sampling(args.g, 256, demo.max_completion_length,
                        temperature=demo.temperature, top_p=demo.top_p, top_k=demo.top_k,
                        share_prompts=True)
    eos_ids = eos_token_ids(model, tokenizer)
    hf = []
    if not args.skip_hf:
        with torch.no_grad():
            hf = [generate(model, tokenizer, rows, prompts, sampling)
                  for _ in range(args.rounds)]
    if args.as_trainer:
        from trainer.engine.colocated import engine_settings

        settings_ = engine_settings(demo, demo.seed, torch.float32)
        calls = demo.prompts_per_step
    else:
        settings_ = EngineSettings(max_model_len=512, max_num_seqs=256, kv_cache_gb=2,
                                   dtype="float32", enforce_eager=True)
        calls = len(rows)
    with policy_weights(model) as weights:
        engine = VLLMEngine(model, settings_, weights)
    with engine:
        # round k draws with step k's seeds, as the trainer's step k would, in calls of
        # ``calls`` prompts
        drawn = []
        for k in range(args.rounds):
            seeds = DrawSeeds(demo.seed, 0, k)
            parts = [generate_on_engine(engine, tokenizer, rows[i : i + calls],
                                        prompts[i : i + calls], sampling, eos_ids, seeds=seeds)
                     for i in range(0, len(rows), calls)]
            drawn += parts
    figures = {"vllm_float32": summary(tokenizer, drawn, args.g)}
    if hf:
        figures["hf"] = summary(tokenizer, hf, args.g)
    for name in figures:
        rollouts = hf if name == "hf" else drawn
        figures[name]["calibration"] = calibration(model, rollouts, demo.temperature,
                                                   eos_ids)
    if hf:
        gap = abs(figures["hf"]["mean_reward"] - figures["vllm_float32"]["mean_reward"])
        se = (figures["hf"]["reward_standard_error"] ** 2
              + figures["vllm_float32"]["reward_standard_error"] ** 2) ** 0.5
        figures["reward_gap_in_standard_errors"] = round(gap / se, 2) if se else None
    settings = {"model": args.model, "prompts": args.prompts, "g": args.g,
                "rounds": args.rounds, "temperature": demo.temperature,
                "top_p": demo.top_p, "top_k": demo.top_k,
                "max_new_tokens": demo.max_completion_length, "dtype": "float32",
                "engine": "as the trainer starts and calls it" if args.as_trainer
                          else "one call per round, 256 sequences at a time"}
    print(json.dumps(figures, indent=2))
    path = record(args.name, figures, settings, args.publish, measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
