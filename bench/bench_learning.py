"""Learning, head to head: held-out accuracy against wall-clock seconds, our trainer against
TRL 1.16's GRPOTrainer.

Both train SmolLM2-135M-Instruct on the demo's task (generated additions) with the demo's
settings, read from ``examples/grpo_arithmetic.yaml`` and mapped one by one onto TRL's
GRPOConfig (G, prompts per step, completion length, temperature, learning rate and its
schedule, AdamW betas, clipping, loss type, β, reward scaling, gradient checkpointing), from
the same initial weights, on the same prompts at every step (``trl_dataset``: ours' order,
TRL not shuffling), with the same reward function (``bench_trainer.reward_demo``: the
server's math verifier's reading with ``extract: last_number``, which pays no completion the
length limit cut, called in-process for both so only the trainer differs; held-out accuracy
is read the same way). Each trainer runs in its own process, one
after the other, on one torch thread. Every ``--eval-every`` steps the clock stops and one
shared function measures greedy accuracy on the same held-out questions. The x axis is
training seconds, evaluation excluded, as the process's CPU time: single-threaded, that is the
wall clock of an idle core, and unlike the wall clock it stays fair when the machine is shared
(the wall clock is recorded too).

    python -m bench.bench_learning                      # the real comparison (~25 min, 2 cores)
    python -m bench.bench_learning --model tiny --steps 4 --eval-samples 8   # a quick try
    python -m bench.bench_learning --figure a.json b.json c.json   # seeds side by side
    python -m bench.bench_learning --engine vllm        # ours drawing with the vLLM engine
    python -m bench.bench_learning --baseline hf --engine vllm --eval-samples 200
        # ours against ours: the engine against the HF path, paired by seed (no TRL)

With ``--engine vllm`` our trainer's rollouts come from its vLLM engine (a process of its own,
``bash scripts/setup_vllm.sh``); the clock then adds the engine process's CPU time to the
trainer's, and counts from before the trainer is built, so the engine's start is paid too.

Prints a table and writes JSON (date, commit, machine, figures) through ``bench/record.py``
as ``bench_learning_seed<N>`` (``bench_learning_vllm_seed<N>`` with the engine; ``--publish``: to
docs/benchmarks/), and its figure to ``bench/results/``. The goal: our trainer reaches TRL's
final held-out accuracy in ≤ 0.7× the seconds TRL takes to reach it (≤ 0.5× with the engine).

``--baseline hf`` races our trainer's HF path instead of TRL (``_vs_hf`` in the file's name):
the same seed gives both the same initial weights and data order, so over several seeds the
per-step differences in accuracy say whether the engine path learns as the HF path does, with
a standard error (``--figure``), which the race against TRL alone cannot.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from bench.bench_trainer import reward_demo, truncated_ids
from bench.record import commit, record

# (model, prompts' ids, each repeated G times in a row) -> each row's new tokens through its EOS
Draw = Callable[[Any, list[list[int]]], list[list[int]]]

ROOT = Path(__file__).resolve().parent.parent


DEMO_CONFIG = ROOT / "examples" / "grpo_arithmetic.yaml"
RESULTS = ROOT / "bench" / "results"


GOALS = {"hf": 0.7, "vllm": 0.5}  # ours' time to TRL's final accuracy, over TRL's
LABELS = {"trl": "TRL 1.16 GRPOTrainer", "hf": "this trainer, HF generate"}
REWARD = "demo: committed last number, cut or unfinished pays 0"
PROMPT_ORDER = "the same prompts at every step for both (ours' order, TRL not shuffling)"


def our_config(model: str, steps: int, out_dir: Path, seed: int, engine: str = "hf",
               max_staleness: int = 0) -> Any:
    from trainer.config import load_config

    return load_config(DEMO_CONFIG, [f"model={model}", f"max_steps={steps}", f"seed={seed}",
                                     f"output_dir={out_dir}", "progress_bar=false",
                                     f"rollout_engine={engine}",
                                     f"max_staleness={max_staleness}"])


def cpu_seconds() -> float:
    """CPU time of this process and the live processes under it (the rollout engine's)."""
    import psutil

    me = psutil.Process()
    total = time.process_time()
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
        except psutil.Error:  # ended between the listing and the read
            continue
        total += t.user + t.system
    return total


def held_out_accuracy(model: Any, tokenizer: Any, rows: list[dict], max_new_tokens: int,
                      batch: int = 32) -> float:
    """Greedy accuracy on ``rows``: the same code scores both trainers' models."""
    import torch
    from transformers import GenerationConfig

    from trainer.rollout import format_prompt

    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    # every sampling field spelled out: nothing comes from the model's generation_config
    gen = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, num_beams=1,
                           repetition_penalty=1.0, pad_token_id=tokenizer.pad_token_id,
                           eos_token_id=tokenizer.eos_token_id)
    correct: list[float] = []
    with torch.no_grad():
        for i in range(0, len(rows), batch):
            chunk = rows[i : i + batch]
            prompts = [format_prompt(r, tokenizer, "prompt", None, True).text for r in chunk]
            enc = tokenizer(prompts, return_tensors="pt", padding=True,
                            add_special_tokens=False).to(device)
            out = model.generate(**enc, generation_config=gen)[:, enc.input_ids.shape[1]:]
            texts = tokenizer.batch_decode(out, skip_special_tokens=True)
            cut = (out != tokenizer.eos_token_id).all(1).tolist()  # no EOS: the limit cut it
            correct += reward_demo(texts, chunk, cut)
    model.train(was_training)
    return sum(correct) / len(correct)


class Clock:
    """Training seconds since ``start``, evaluation excluded: wall-clock, and the process's
    CPU time. With one torch thread the CPU time is what the wall clock reads on an idle core,
    and it stays fair when other work shares the machine (the wall clock then measures the
    neighbours as much as the trainer)."""

    def __init__(self, name: str, model: Any, tokenizer: Any, rows: list[dict],
                 max_new_tokens: int) -> None:
        self.name = name
        self.model, self.tokenizer, self.rows, self.tokens = model, tokenizer, rows, max_new_tokens
        self.started = False
        self.t0 = self.c0 = 0.0
        self.excluded = self.excluded_cpu = 0.0
        self.points: list[dict[str, float]] = []

    def start(self) -> None:
        self.started = True
        self.t0, self.c0 = time.perf_counter(), cpu_seconds()

    def evaluate(self, step: int) -> None:
        wall = time.perf_counter() - self.t0 - self.excluded if self.started else 0.0
        cpu = cpu_seconds() - self.c0 - self.excluded_cpu if self.started else 0.0
        # only this process's CPU is taken out: the evaluation runs here, and an engine
        # drawing the next step's rollouts meanwhile (max_staleness > 0) is training time
        t, c = time.perf_counter(), time.process_time()
        accuracy = held_out_accuracy(self.model, self.tokenizer, self.rows, self.tokens)
        eval_cpu = time.process_time() - c
        if self.started:  # the evaluation before the start is on no clock to take it off
            self.excluded += time.perf_counter() - t
            self.excluded_cpu += eval_cpu
        self.points.append({"step": step, "seconds": cpu, "wall_seconds": wall,
                            "accuracy": accuracy, "eval_cpu_seconds": eval_cpu})
        print(f"  {self.name:>4} step {step:3d}  {cpu:8.1f} s CPU  {wall:8.1f} s wall  held-out accuracy "
              f"{accuracy:.3f}", file=sys.stderr, flush=True)


STEP_METRICS = ("reward", "accuracy", "completion_length", "truncated_fraction", "grad_norm",
                "loss", "frac_reward_zero_std", "sampling/staleness")


def run_ours(model_name: str, steps: int, eval_every: int, eval_rows: list[dict],
             out_dir: Path, seed: int, engine: str = "hf", max_staleness: int = 0,
             draw: Draw | None = None
             ) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """The held-out points, and each step's training reward, lengths, times and sampling
    gap (what tells two runs' learning apart between evaluations). ``draw``: what samples
    the HF path's rollouts in place of its ``generate`` (``bench_lockstep``)."""
    import torch

    from trainer import rollout
    from trainer.data import load_rows
    from trainer.models import load_model, prepare_tokenizer
    from trainer.rewards import FunctionScorer
    from trainer.train import GRPOTrainer, seed_everything

    config = our_config(model_name, steps, out_dir, seed, engine, max_staleness)
    seed_everything(config.seed)
    model, tokenizer = load_model(model_name, torch.float32, config.seed)
    prepare_tokenizer(tokenizer)
    with contextlib.ExitStack() as patched:
        if draw is not None:  # undone after: a caller (a test) goes on with the module
            patched.enter_context(mock.patch.object(
                rollout, "_generate", ours_generate(draw, tokenizer.pad_token_id)))
        clock = Clock("ours", model, tokenizer, eval_rows, config.max_completion_length)
        clock.evaluate(0)
        clock.start()  # before the trainer is built: an engine's start is training time
        trainer = GRPOTrainer(model, tokenizer, load_rows(config.dataset), config, None,
                              scorer=FunctionScorer(reward_demo))
        clock.model, clock.tokenizer = trainer.policy, trainer.tokenizer
        logged: list[dict[str, float]] = []
        for step in range(1, steps + 1):
            metrics = trainer.training_step()
            logged.append({k: float(v) for k, v in metrics.items() if k in STEP_METRICS
                           or k.startswith(("time/", "sampling/sampling_logp",
                                            "sampling/importance"))})
            if step % eval_every == 0 or step == steps:
                clock.evaluate(step)
        trainer.close()
    return clock.points, logged


def ours_generate(draw: Draw, pad_id: int) -> Callable[..., Any]:
    """Our rollout's ``_generate`` edge (N prompt rows, G samples each, new tokens padded)
    handed to ``draw``, which takes each prompt's ids G times over, as TRL passes them."""
    import torch

    def generate(model: Any, ids: Any, mask: Any, config: Any, G: int = 1,
                 share: bool = False, stopping_criteria: Any = None) -> Any:
        prompts = [ids[i][mask[i].bool()].tolist() for i in range(ids.shape[0])
                   for _ in range(G)]
        drawn = draw(model, prompts)
        width = max(len(c) for c in drawn)
        return torch.tensor([c + [pad_id] * (width - len(c)) for c in drawn])

    return generate


def trl_args(config: Any, out_dir: Path) -> Any:
    """Our GRPOConfig, option by option, as TRL's (anything not named is left at TRL's
    default only where it does not change the algorithm: logging, saving)."""
    from trl import GRPOConfig

    return GRPOConfig(
        # TRL counts optimizer steps, μ (num_iterations) to a batch; our max_steps, batches
        output_dir=str(out_dir), max_steps=config.max_steps * config.num_iterations,
        seed=config.seed,
        per_device_train_batch_size=config.prompts_per_step * config.num_generations,
        gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=config.num_generations, num_iterations=config.num_iterations,
        max_completion_length=config.max_completion_length, temperature=config.temperature,
        top_p=config.top_p, top_k=0, min_p=None, repetition_penalty=1.0,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant" if config.lr_scheduler == "constant"
        else config.lr_scheduler,
        warmup_steps=config.warmup_steps, weight_decay=config.weight_decay,
        adam_beta1=config.adam_beta1, adam_beta2=config.adam_beta2,
        max_grad_norm=config.max_grad_norm, loss_type=config.loss_type, beta=config.beta,
        epsilon=config.epsilon_low, epsilon_high=config.epsilon_high_value,
        importance_sampling_level=config.importance_sampling_level,
        scale_rewards=config.scale_rewards,
        mask_truncated_completions=config.mask_truncated_completions,
        gradient_checkpointing=config.gradient_checkpointing,
        use_cpu=True, bf16=False, logging_steps=1, report_to=[], save_strategy="no",
        dataloader_num_workers=0, disable_tqdm=True, shuffle_dataset=False,
    )


def trl_dataset(config: Any, steps: int) -> Any:
    """The prompts in the order our trainer takes them, for TRL told not to shuffle
    (``trl_args``): both train on the same prompts at every step, so the race tells the
    trainers apart rather than two draws of the data's order."""
    from datasets import Dataset

    from trainer.data import PromptStream, load_rows

    rows = PromptStream(load_rows(config.dataset), config.seed).take(
        config.prompts_per_step * steps)
    return Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}],
                               "answer": r["answer"]} for r in rows])


def run_trl(model_name: str, steps: int, eval_every: int, eval_rows: list[dict],
            out_dir: Path, seed: int, draw: Draw | None = None) -> list[dict[str, float]]:
    """The held-out points. ``draw``: what samples TRL's rollouts in place of its
    ``generate`` (``bench_lockstep``)."""
    import torch
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from trainer.models import load_model, prepare_tokenizer
    from trainer.train import seed_everything

    config = our_config(model_name, steps, out_dir, seed)
    seed_everything(config.seed)
    model, tokenizer = load_model(model_name, torch.float32, config.seed)
    prepare_tokenizer(tokenizer)
    dataset = trl_dataset(config, steps)

    def reward(completions: list, answer: list, completion_ids: list, **_: Any) -> list[float]:
        return reward_demo(completions, [{"answer": a} for a in answer],
                           truncated_ids(completion_ids, tokenizer.eos_token_id))

    clock = Clock("trl", model, tokenizer, eval_rows, config.max_completion_length)

    class Evaluate(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001
            clock.evaluate(0)
            clock.start()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            step, mid_batch = divmod(state.global_step, config.num_iterations)
            if not mid_batch and (step % eval_every == 0 or step == steps):
                clock.evaluate(step)

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=trl_args(config, out_dir),
                          train_dataset=dataset, processing_class=tokenizer,
                          callbacks=[Evaluate()])
    if draw is not None:
        trainer._generate_single_turn = (
            lambda prompt_ids, *_, **__: (draw(trainer.model, prompt_ids), None))
    trainer.train()
    return clock.points


def child(which: str, model: str, steps: int, eval_every: int, eval_samples: int,
          seed: int, engine: str, max_staleness: int = 0) -> None:
    from trainer.data import load_rows

    eval_rows = load_rows("arithmetic-eval")[:eval_samples]  # the demo's held-out questions
    # the engine in the name: two runs of ours (--baseline hf) at once write apart
    out_dir = RESULTS / "tmp" / f"learning-{which}-{engine}-{model}"
    logged: list[dict[str, float]] = []
    if which == "ours":
        points, logged = run_ours(model, steps, eval_every, eval_rows, out_dir, seed, engine,
                                  max_staleness)
    else:
        points = run_trl(model, steps, eval_every, eval_rows, out_dir, seed)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"points": points, "peak_mb": peak_mb, "steps": logged}))


def time_to(points: list[dict[str, float]], accuracy: float) -> float | None:
    """Training seconds at the first evaluation with at least ``accuracy``."""
    return next((p["seconds"] for p in points if p["accuracy"] >= accuracy), None)


def baseline_of(run: dict) -> str:
    """Whom ours raced in ``run``: ``trl``, or ``hf`` (our own HF path)."""
    return run["args"].get("baseline", "trl")


def plot(runs: list[dict], path: Path, title: str) -> None:
    """Accuracy against training seconds, one panel per run (seed), both racers in each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(len(runs), 6)  # rows of six: a dozen seeds in one row cannot be read
    rows = -(-len(runs) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.2 * columns, 4.2 * rows), sharey=True,
                             squeeze=False)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs, strict=False):
        base = baseline_of(run)
        ours = "this trainer" + (", vLLM engine" if run["args"].get("engine") == "vllm" else "")
        for which, label in (("ours", ours), (base, LABELS[base])):
            pts = run[which]["points"]
            ax.plot([p["seconds"] for p in pts], [p["accuracy"] for p in pts], "o-",
                    label=label)
        target = run["summary"]["target_accuracy"]
        ax.axhline(target, color="grey", lw=0.8, ls=":", label=f"{LABELS[base]}: final accuracy")
        ax.set_title(f"seed {run['args']['seed']}", fontsize=10)
        ax.set_xlabel("training seconds, one thread (CPU time, evaluation excluded)")
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel(f"held-out accuracy (greedy, {runs[0]['args']['eval_samples']} "
                          "questions)")
    axes[0][0].legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mean_curve(runs: list[dict], which: str) -> list[dict[str, float]]:
    """Accuracy and seconds averaged over the runs at each step that all of them evaluated."""
    steps = sorted(set.intersection(*({p["step"] for p in r[which]["points"]} for r in runs)))
    by_step = [{p["step"]: p for p in r[which]["points"]} for r in runs]
    return [{"step": s,
             "seconds": sum(b[s]["seconds"] for b in by_step) / len(runs),
             "accuracy": sum(b[s]["accuracy"] for b in by_step) / len(runs)} for s in steps]


def paired_differences(runs: list[dict], base: str) -> list[dict[str, float]]:
    """Per step that every run evaluated: ours' accuracy minus the baseline's, averaged over
    the runs (seeds), with its standard error over them and how many seeds ours led. The
    same seed gives both racers the same start and data, so the seed's luck mostly cancels
    in the difference and what is left is how the two learn."""
    import statistics

    steps = sorted(set.intersection(*({p["step"] for p in r[w]["points"]}
                                       for r in runs for w in (base, "ours"))))
    out = []
    for step in steps:
        diffs = [next(p["accuracy"] for p in r["ours"]["points"] if p["step"] == step)
                 - next(p["accuracy"] for p in r[base]["points"] if p["step"] == step)
                 for r in runs]
        sem = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
        out.append({"step": step, "difference": statistics.fmean(diffs), "sem": sem,
                    "ours_ahead": sum(d > 0 for d in diffs), "behind": sum(d < 0 for d in diffs)})
    return out


def seeds_summary(runs: list[dict]) -> None:
    """Per seed, and on the mean curves over the seeds (less of one evaluation's luck): the
    time to the baseline's final accuracy, ours over the baseline's; against our own HF path,
    the paired per-step differences too."""
    base = baseline_of(runs[0])
    for run in runs:
        s = run["summary"]
        ratio = "not reached" if s["time_ratio"] is None else f"{s['time_ratio']:.2f}x"
        print(f"seed {run['args']['seed']}: target {s['target_accuracy']:.3f}, time ratio "
              f"{ratio}, first-{run['args']['steps']}-steps time {s['step_time_ratio']:.2f}x")
    curves = {w: mean_curve(runs, w) for w in (base, "ours")}
    target = curves[base][-1]["accuracy"]
    t_base, t_ours = time_to(curves[base], target), time_to(curves["ours"], target)
    print(f"\nmean over {len(runs)} seeds\n{'step':>4} | {base + ' s':>7} {base + ' acc':>8} | "
          f"{'ours s':>7} {'ours acc':>8}")
    base_steps = {p["step"]: p for p in curves[base]}
    for p in curves["ours"]:
        t = base_steps.get(p["step"])
        left = f"{t['seconds']:7.1f} {t['accuracy']:8.3f}" if t else f"{'':>7} {'':>8}"
        print(f"{p['step']:4d} | {left} | {p['seconds']:7.1f} {p['accuracy']:8.3f}")
    if t_ours is None or not t_base:
        print(f"target {target:.3f} ({base}'s final mean accuracy): no time ratio")
    else:
        verdict = ""
        if base == "trl":
            goal = GOALS[runs[0]["args"].get("engine", "hf")]
            verdict = (f" (goal <= {goal}x: "
                       f"{'met' if t_ours / t_base <= goal else 'not met'})")
        print(f"target {target:.3f} ({base}'s final mean accuracy): {base} {t_base:.1f} s, "
              f"ours {t_ours:.1f} s -> {t_ours / t_base:.2f}x {base}'s time{verdict}")
    if base == "hf" and len(runs) > 1:
        print(f"\nours minus the HF path, paired by seed ({len(runs)} seeds)\n"
              f"{'step':>4} | {'mean':>7} {'s.e.':>6} | seeds ours ahead / behind")
        for d in paired_differences(runs, base):
            print(f"{d['step']:4d} | {d['difference']:+7.3f} {d['sem']:6.3f} | "
                  f"{d['ours_ahead']} / {d['behind']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--steps", type=int, default=14, help="the baseline's steps: the demo's 14 "
                    "by default; its accuracy after them is the target")
    ap.add_argument("--ours-steps", type=int, help="our trainer's steps (default: 1.5 x "
                    "--steps against TRL, --steps against the HF path): the race is to TRL's "
                    "final accuracy, and the goal gives ours up to 0.7x TRL's time, which at a "
                    "faster step is more steps")
    ap.add_argument("--baseline", choices=sorted(LABELS), default="trl", help="whom ours "
                    "races: TRL, or our own HF path (to compare --engine vllm with it, paired "
                    "by seed)")
    ap.add_argument("--seed", type=int, default=0, help="the demo config's seed, for both "
                    "(sampling, data order)")
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--eval-samples", type=int, default=64, help="the demo's 64 by default "
                    "(at most its 200 held-out questions)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each trainer (1: "
                    "on a shared, oversubscribed machine two OpenMP threads ran a step ~10x "
                    "slower than one)")
    ap.add_argument("--engine", choices=sorted(GOALS), default="hf", help="what draws our "
                    "trainer's rollouts: its HF generate, or its vLLM engine (the clock adds "
                    "the engine's CPU time and start)")
    ap.add_argument("--max-staleness", type=int, default=0, help="with --engine vllm: "
                    "asynchronous GRPO, the engine drawing up to this many steps ahead")
    ap.add_argument("--parallel", action="store_true", help="run both trainers at once (the "
                    "CPU-time clock keeps it fair; the wall clock does not)")
    ap.add_argument("--alone", action="store_true", help="run TRL by itself for --steps "
                    "steps and record its curve (its steps past a race's, on the same prompts "
                    "and draws: its first steps repeat the race's exactly)")
    ap.add_argument("--figure", nargs="+", type=Path, metavar="JSON", help="only draw the "
                    "runs of these result files side by side into bench/results/"
                    "bench_learning-seeds.png")
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/bench_learning[_vllm]_seed<N>.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.figure:
        runs = [run_of(json.loads(f.read_text())) for f in args.figure]
        RESULTS.mkdir(parents=True, exist_ok=True)  # a fresh clone has none
        out = RESULTS / f"{run_name(runs[0]['args']).rsplit('_seed', 1)[0]}-seeds.png"
        plot(runs, out, f"{runs[0]['args']['model']}: GRPO on additions, same settings and "
             "reward, both trainers")
        print(f"wrote {out.relative_to(ROOT)}")
        seeds_summary(runs)
        return
    if args.baseline == "hf" and args.engine == "hf":
        sys.exit("bench_learning: --baseline hf races the HF path; give ours --engine vllm")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        child(args.child, args.model, args.steps, args.eval_every, args.eval_samples,
              args.seed, args.engine, args.max_staleness)
        return
    measured_on = commit()
    if args.alone:
        run_alone(args, measured_on)
        return
    base = args.baseline
    default_ours = args.steps if base == "hf" else round(1.5 * args.steps)
    steps = {base: args.steps, "ours": args.ours_steps or default_ours}
    # each racer: the child that runs it, its engine and staleness
    racers = {base: ("trl", "hf", 0) if base == "trl" else ("ours", "hf", 0),
              "ours": ("ours", args.engine, args.max_staleness)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    procs: dict[str, subprocess.Popen] = {}
    outputs: dict[str, str] = {}
    for which, (kind, engine, staleness) in racers.items():
        print(f"{which}: training {args.model} for {steps[which]} steps", file=sys.stderr)
        procs[which] = spawn(args, kind, steps[which], engine, staleness)
        if not args.parallel:
            outputs[which] = procs[which].communicate()[0]
    for which, proc in procs.items():
        results[which] = child_result(which, proc, outputs.get(which))

    base_final = results[base]["points"][-1]["accuracy"]
    t_base, t_ours = time_to(results[base]["points"], base_final), time_to(
        results["ours"]["points"], base_final)
    # a baseline at its final accuracy from the start (t = 0) learned nothing to race against
    ratio = None if t_ours is None or not t_base else t_ours / t_base
    # per step over the steps both ran (ours' later steps have shorter completions)
    at = {w: next(p for p in results[w]["points"] if p["step"] >= args.steps)
          for w in (base, "ours")}
    goal = GOALS[args.engine] if base == "trl" else None
    summary = {"target_accuracy": base_final, f"{base}_seconds_to_target": t_base,
               "ours_seconds_to_target": t_ours, "time_ratio": ratio, "goal": goal,
               "goal_met": goal is not None and ratio is not None and ratio <= goal,
               "step_time_ratio": at["ours"]["seconds"] / at[base]["seconds"]}
    print(f"\n{args.model}, seed {args.seed}, held-out greedy accuracy on "
          f"{args.eval_samples} questions every {args.eval_every} steps\n")
    print("seconds: process CPU time of training, one thread (wall-clock in brackets)")
    print(f"{'step':>4} | {base + ' s':>16} {base + ' acc':>8} | {'ours s':>16} {'ours acc':>8}")

    def cells(p: dict | None) -> str:
        if p is None:
            return f"{'':>16} {'':>8}"
        return f"{p['seconds']:7.1f} ({p['wall_seconds']:6.1f}) {p['accuracy']:8.3f}"

    by_step = {w: {p["step"]: p for p in results[w]["points"]} for w in (base, "ours")}
    for step in sorted(set(by_step[base]) | set(by_step["ours"])):
        print(f"{step:4d} | {cells(by_step[base].get(step))} | "
              f"{cells(by_step['ours'].get(step))}")
    for which in (base, "ours"):
        last = results[which]["points"][-1]
        print(f"{which}: {last['seconds']:.1f} s CPU ({last['wall_seconds']:.1f} s wall) of "
              f"training for {last['step']} steps ({last['seconds'] / last['step']:.1f} "
              f"s/step), peak RSS {results[which]['peak_mb']:.0f} MB")
    print(f"the first {args.steps} steps: ours {at['ours']['seconds']:.1f} s, {base} "
          f"{at[base]['seconds']:.1f} s -> {summary['step_time_ratio']:.2f}x")
    if not t_base:
        print(f"{base} ended at its starting accuracy ({base_final:.3f}): no time ratio")
    elif ratio is None:
        print(f"target {base_final:.3f} ({base}'s final accuracy): ours did not reach it")
    else:
        verdict = (f" (goal <= {goal}x: {'met' if summary['goal_met'] else 'not met'})"
                   if goal is not None else "")
        print(f"target {base_final:.3f} ({base}'s final accuracy): {base} {t_base:.1f} s, "
              f"ours {t_ours:.1f} s -> {ratio:.2f}x {base}'s time{verdict}")
    settings = {k: v for k, v in vars(args).items()
                if k not in ("figure", "child", "publish", "parallel")}
    run = {"args": settings, "summary": summary, **results}
    name = run_name(settings)
    figure = RESULTS / f"{name}.png"
    plot([run], figure, f"{args.model}: GRPO on additions, same settings and reward")
    # the reward in the record: races under the bare last-number rule paid cut completions
    path = record(name, {"summary": summary, **results},
                  {**settings, "parallel": args.parallel, "reward": REWARD,
                   "prompt_order": PROMPT_ORDER}, publish=args.publish,
                  measured_on=measured_on)
    print(f"wrote {path.relative_to(ROOT)} and {figure.relative_to(ROOT)}")


def spawn(args: argparse.Namespace, kind: str, steps: int, engine: str, staleness: int
          ) -> subprocess.Popen:
    """One trainer's child process (``--child``), its output piped."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": str(args.threads)}
    return subprocess.Popen(
        [sys.executable, "-m", "bench.bench_learning", "--child", kind, "--model", args.model,
         "--steps", str(steps), "--eval-every", str(args.eval_every), "--eval-samples",
         str(args.eval_samples), "--threads", str(args.threads), "--seed", str(args.seed),
         "--engine", engine, "--max-staleness", str(staleness)],
        stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def child_result(which: str, proc: subprocess.Popen, stdout: str | None = None,
                 bench: str = "bench_learning") -> dict[str, Any]:
    """What a child printed as its RESULT; ``bench`` exits with one line if it failed."""
    stdout = stdout if stdout is not None else proc.communicate()[0]
    line = next((x for x in stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        sys.exit(f"{bench}: {which} failed (exit code {proc.returncode})")
    return json.loads(line[7:])


def run_alone(args: argparse.Namespace, measured_on: str) -> None:
    """TRL alone for ``args.steps`` steps: where a race's target (TRL's accuracy at its last
    step) sits on TRL's own longer curve."""
    print(f"trl: training {args.model} for {args.steps} steps, alone", file=sys.stderr)
    result = child_result("trl", spawn(args, "trl", args.steps, "hf", 0))
    for p in result["points"]:
        print(f"step {p['step']:3d}  {p['seconds']:7.1f} s CPU  accuracy {p['accuracy']:.3f}")
    settings = {"model": args.model, "steps": args.steps, "seed": args.seed,
                "eval_every": args.eval_every, "eval_samples": args.eval_samples,
                "threads": args.threads, "reward": REWARD, "prompt_order": PROMPT_ORDER}
    path = record(alone_name(args.steps, args.seed), {"trl": result}, settings,
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path.relative_to(ROOT)}")


def alone_name(steps: int, seed: int) -> str:
    return f"bench_learning_trl_alone{steps}_seed{seed}"


def run_name(settings: dict[str, Any]) -> str:
    """The result's name: engine, staleness and baseline in it, so races never overwrite
    each other's published files."""
    staleness = settings.get("max_staleness", 0)
    return (f"bench_learning{'_vllm' if settings.get('engine') == 'vllm' else ''}"
            f"{f'_async{staleness}' if staleness else ''}"
            f"{'_vs_hf' if settings.get('baseline', 'trl') == 'hf' else ''}"
            f"_seed{settings['seed']}")


def run_of(data: dict[str, Any]) -> dict[str, Any]:
    """A run as ``plot`` and ``seeds_summary`` read it, from a file ``record`` wrote."""
    return {"args": data["settings"], **data["figures"]}


if __name__ == "__main__":
    main()
