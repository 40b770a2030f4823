"""Seconds per GRPO step and peak memory: our trainer against TRL's GRPOTrainer.

Same model, prompts, G, max completion length, optimizer settings and reward function (a
local Python function for both, so only the trainer differs), each trainer in its own
process (peak RSS is per process), in the same run. Models: the tiny model built in code, and
SmolLM2-135M-Instruct. The first step of each run is a warm-up and is not counted.

    python -m bench.bench_trainer [--models tiny,smollm2] [--steps 4] [--publish]
    python -m bench.bench_trainer --models smollm2 --lora 16    # + LoRA r=16 vs full, ours
    BENCH_GRADIENT_CHECKPOINTING=0 python -m bench.bench_trainer    # both without it

Prints a table and writes JSON (date, commit, machine, figures) through ``bench/record.py``
(``bench_trainer``, or ``bench_trainer_lora`` with ``--lora``). Needs ``pip install trl``
(not a dependency of the project).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.record import commit, record

ROOT = Path(__file__).resolve().parent.parent

PROMPTS, G = 4, 8


def reward_demo(completions: list, rows: list[dict], truncated: list[bool]) -> list[float]:
    """What the demo pays (the server's math verifier with ``extract: last_number``): 1 when
    the completion commits to the row's answer as its last number. A completion the length
    limit cut commits to nothing (its last number may be where the cut fell), and neither
    does one that stops mid-sentence: paying those, as the bare last-number rule does, pays
    a policy for never stopping ("83\n\nYour answer must contain" scored 1)."""
    from reward_server.verifiers.math.commit import NoCommitment, committed_answer

    texts = [_text(c) for c in completions]
    out = []
    for text, paid, cut in zip(texts, reward_last_number(texts, rows), truncated, strict=True):
        # the trainer marks a cut completion; one that was not cut carries no flag
        committed = committed_answer(text, "last_number", truncated=True if cut else None)
        out.append(0.0 if isinstance(committed, NoCommitment) else paid)
    return out


def _text(completion: str | list[dict]) -> str:
    """A completion's text: TRL passes a conversation for a chat dataset."""
    return completion[-1]["content"] if isinstance(completion, list) else completion


def truncated_ids(completion_ids: list[list[int]], eos_id: int) -> list[bool]:
    """TRL's completion ids run through the EOS, where there is one: without it, the
    length limit cut the completion."""
    return [eos_id not in ids for ids in completion_ids]


def reward_last_number(completions: list, rows: list[dict]) -> list[float]:
    """1 when the last number of the completion is the row's answer."""
    import re

    out = []
    for completion, row in zip(completions, rows, strict=True):
        numbers = re.findall(r"-?\d+", _text(completion))
        out.append(1.0 if numbers and numbers[-1] == str(row["answer"]) else 0.0)
    return out


CPU_TIMES: list[float] = []  # process CPU time per step (ours), fair on a shared machine
GRADIENT_CHECKPOINTING = os.environ.get("BENCH_GRADIENT_CHECKPOINTING", "1") == "1"


def settings(model: str) -> dict:
    """The same for both trainers; gradient checkpointing on, as TRL's default has it."""
    common = {"max_completion_length": 16, "gradient_checkpointing": GRADIENT_CHECKPOINTING}
    if model == "tiny":
        return {**common, "learning_rate": 3e-3, "temperature": 1.0}
    return {**common, "learning_rate": 2e-5, "temperature": 0.7}


ENGINES = {  # ours with the vLLM engine drawing: synchronous, and one step ahead
    "ours-vllm": {"rollout_engine": "vllm"},
    "ours-vllm-ahead": {"rollout_engine": "vllm", "max_staleness": 1},
}


def run_ours(model_name: str, steps: int, out_dir: Path, lora_r: int = 0,
             **engine: Any) -> list[float]:
    import torch

    from trainer.config import GRPOConfig
    from trainer.data import load_rows
    from trainer.models import load_model
    from trainer.rewards import FunctionScorer
    from trainer.train import GRPOTrainer, seed_everything

    s = settings(model_name)
    config = GRPOConfig(model=model_name, dataset="arithmetic", output_dir=str(out_dir),
                        max_steps=steps, prompts_per_step=PROMPTS, num_generations=G,
                        generation_chunk=PROMPTS, micro_batch_size=PROMPTS * G,
                        max_completion_length=s["max_completion_length"],
                        learning_rate=s["learning_rate"], temperature=s["temperature"],
                        gradient_checkpointing=s["gradient_checkpointing"],
                        loss_type="dapo", beta=0.0, progress_bar=False, lora_r=lora_r,
                        **engine)
    seed_everything(0)
    model, tokenizer = load_model(model_name, torch.float32, 0)
    trainer = GRPOTrainer(model, tokenizer, load_rows("arithmetic"), config, None,
                          scorer=FunctionScorer(reward_demo))
    times, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.training_step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    trainer.close()  # an engine's process ends here: its peak RSS is then the children's
    CPU_TIMES.extend(cpu)
    return times


def run_trl(model_name: str, steps: int, out_dir: Path) -> list[float]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.data import load_rows
    from trainer.models import load_model, prepare_tokenizer, smollm2_path

    s = settings(model_name)
    rows = load_rows("arithmetic")
    if model_name == "tiny":
        model, tokenizer = load_model("tiny", torch.float32, 0)
        dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]}
                                     for r in rows])
    else:
        model = str(smollm2_path())
        _, tokenizer = load_model(model, torch.float32, 0)
        dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}],
                                      "answer": r["answer"]} for r in rows])
    prepare_tokenizer(tokenizer)

    def reward(completions, answer, completion_ids, **_):
        return reward_demo(completions, [{"answer": a} for a in answer],
                           truncated_ids(completion_ids, tokenizer.eos_token_id))

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    args = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=PROMPTS * G, num_generations=G,
        max_completion_length=s["max_completion_length"], learning_rate=s["learning_rate"],
        temperature=s["temperature"], beta=0.0, loss_type="dapo", max_steps=steps,
        logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=False,
        seed=0, dataloader_num_workers=0, top_k=0,
        gradient_checkpointing=s["gradient_checkpointing"],
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[Timer()])
    trainer.train()
    return times


def child(which: str, model: str, steps: int, out_dir: Path, lora_r: int) -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if which == "trl":
        times = run_trl(model, steps, out_dir)
    else:
        times = run_ours(model, steps, out_dir, lora_r if which == "ours-lora" else 0,
                         **ENGINES.get(which, {}))
    # the engine's process counts too: a step needs both in memory
    peak_mb = sum(resource.getrusage(who).ru_maxrss / 1024
                  for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print("RESULT " + json.dumps({"times": times, "cpu_times": CPU_TIMES, "peak_mb": peak_mb}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--lora", type=int, default=0, metavar="R",
                    help="also time our trainer with LoRA of rank R (against full fine-tuning)")
    ap.add_argument("--no-trl", action="store_true", help="only our trainer (with --lora)")
    ap.add_argument("--engine", action="store_true", help="also ours with the vLLM engine "
                    "drawing, synchronous and one step ahead (bash scripts/setup_vllm.sh)")
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/bench_trainer[_lora].json")
    ap.add_argument("--child", nargs=2, metavar=("WHICH", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    tmp = ROOT / "bench" / "results" / "tmp"
    if args.child:
        child(args.child[0], args.child[1], args.steps, tmp / f"{args.child[0]}-{args.child[1]}",
              args.lora)
        return
    measured_on = commit()
    rows: dict[str, dict] = {}
    for model in args.models.split(","):
        trainers = ("ours",) if args.no_trl else ("trl", "ours")
        for which in (trainers + (("ours-lora",) if args.lora else ())
                      + (tuple(ENGINES) if args.engine else ())):
            out = subprocess.run(
                [sys.executable, "-m", "bench.bench_trainer", "--steps", str(args.steps),
                 "--lora", str(args.lora), "--child", which, model], cwd=ROOT,
                capture_output=True, text=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{which} on {model} failed:\n{out.stderr[-3000:]}")
            result = json.loads(line[7:])
            counted = result["times"][1:] or result["times"]  # the first step warms up
            cpu = result["cpu_times"][1:] or result["cpu_times"]
            rows[f"{model}/{which}"] = {"s_per_step": statistics.median(counted),
                                        "cpu_s_per_step": statistics.median(cpu) if cpu else None,
                                        "peak_mb": result["peak_mb"], "steps": result["times"]}
    print(f"\n{PROMPTS} prompts x G={G} per step, median of {args.steps - 1} steps after a "
          f"warm-up, gradient checkpointing {'on' if GRADIENT_CHECKPOINTING else 'off'}\n")
    print(f"{'':18} {'s/step':>8} {'peak MB':>9} {'time vs TRL':>12} {'memory vs TRL':>14}")
    for key, row in rows.items():
        model = key.split("/")[0]
        base = rows.get(f"{model}/trl")
        vs = (f"{row['s_per_step'] / base['s_per_step']:12.2f} "
              f"{row['peak_mb'] / base['peak_mb']:14.2f}" if base else f"{'-':>12} {'-':>14}")
        print(f"{key:18} {row['s_per_step']:8.2f} {row['peak_mb']:9.0f} {vs}")
    for model in args.models.split(","):
        if f"{model}/ours-lora" in rows:
            lora, full = rows[f"{model}/ours-lora"], rows[f"{model}/ours"]
            print(f"{model}: LoRA r={args.lora} vs full fine-tuning (ours): wall time "
                  f"{lora['s_per_step'] / full['s_per_step']:.2f}x, CPU time "
                  f"{lora['cpu_s_per_step']:.1f} vs {full['cpu_s_per_step']:.1f} s/step = "
                  f"{lora['cpu_s_per_step'] / full['cpu_s_per_step']:.2f}x, peak RSS "
                  f"{lora['peak_mb']:.0f} vs {full['peak_mb']:.0f} MB = "
                  f"{lora['peak_mb'] / full['peak_mb']:.2f}x")
    settings = {"models": args.models, "steps": args.steps, "lora": args.lora,
                "trl": not args.no_trl, "engine": args.engine, "prompts": PROMPTS,
                "group_size": G,
                "gradient_checkpointing": GRADIENT_CHECKPOINTING,
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    path = record("bench_trainer_lora" if args.lora else "bench_trainer", rows, settings,
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
