"""An example config trained end to end against a fresh reward server, as a user runs it, and
its run summarised as data: held-out accuracy at each evaluation, the training reward and
each reward column over the first and last steps, tool metrics where the run used the tool,
and seconds per step.

Several runs of one config (a setting and its baseline, ``--set code_tool=false``) are
compared by their records side by side, and by ``grpo-plot A B --out x.png``.

    python -m bench.bench_example examples/reasoning_gym_smollm2.yaml [--set k=v ...]
        [--name NAME] [--publish]       # NAME.json in docs/benchmarks/, its curves in docs/figures/
    python -m bench.bench_example --summarise runs/tool --name tool_smollm2 [--publish]
                                        # a run already made by the command above's grpo-train

Writes JSON (date, commit, machine, figures) through ``bench/record.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.record import ROOT, commit, record
from reward_server.testing import run_server

FIGURES = ROOT / "docs" / "figures"
EDGE_STEPS = 5  # steps averaged at each end of the run: one step's 32 rollouts are noisy
# per-step figures worth keeping for every step (the rest are in the run's metrics.jsonl)
PER_STEP = ("reward", "accuracy", "completion_length", "time/step", "time/generate",
            "time/train", "time/weight_sync", "tools/call_frequency",
            "tools/failure_frequency", "tools/program_error_frequency", "time/tools")


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def summarise(run_dir: Path) -> dict[str, Any]:
    """The run's figures from its ``metrics.jsonl``."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
               if line.strip()]
    steps = [r for r in records if "reward" in r]
    evals = [{"step": r["step"], "accuracy": r["eval/accuracy"],
              "reward": r.get("eval/reward")} for r in records if "eval/accuracy" in r]
    columns = sorted({k for r in steps for k in r if k.startswith(("rewards/", "tools/"))
                      and not k.endswith(("/std", "/unscorable_rate"))})
    ends: dict[str, Any] = {}
    for key in ["reward", "accuracy", "completion_length", *columns]:
        values = [r[key] for r in steps if r.get(key) is not None]
        ends[key] = {"first_steps": _mean(values[:EDGE_STEPS]),
                     "last_steps": _mean(values[-EDGE_STEPS:])}
    return {
        "steps": len(steps),
        "held_out": evals,
        "held_out_accuracy_before": evals[0]["accuracy"] if evals else None,
        "held_out_accuracy_after": evals[-1]["accuracy"] if len(evals) > 1 else None,
        "train": ends,
        "mean_step_s": _mean([r["time/step"] for r in steps if "time/step" in r]),
        "per_step": [{k: r[k] for k in ("step", *PER_STEP) if k in r} for r in steps],
    }


def train(config: Path, overrides: list[str], run_dir: Path) -> None:
    """``grpo-train`` on ``config`` against a fresh server, into ``run_dir``."""
    with run_server(Path(tempfile.mkdtemp()), startup_s=300) as srv:
        time.sleep(20)  # the sandbox pool and the verifiers' workers warm up first
        command = [sys.executable, "-m", "trainer.cli", "--config", str(config),
                   "--reward-url", srv.url, "--set", "progress_bar=false",
                   "--set", f"output_dir={run_dir}"]
        for override in overrides:
            command += ["--set", override]
        subprocess.run(command, cwd=ROOT, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, nargs="?")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--summarise", type=Path, metavar="RUN_DIR",
                        help="summarise this run instead of training one")
    parser.add_argument("--name", help="the record's name (default: the config's stem)")
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    if (args.config is None) == (args.summarise is None):
        parser.error("give a config to train, or --summarise RUN_DIR")
    measured_on = commit()
    if args.summarise is not None:
        run_dir = args.summarise
        config = json.loads((run_dir / "config.json").read_text())
        command = "grpo-train (the run's config.json) against a fresh reward-server"
    else:
        run_dir = ROOT / "runs" / f"bench-{args.config.stem}"
        shutil.rmtree(run_dir, ignore_errors=True)
        train(args.config, args.set, run_dir)
        config = json.loads((run_dir / "config.json").read_text())
        command = f"python -m bench.bench_example {args.config} " + " ".join(
            f"--set {s}" for s in args.set)
    name = args.name or (args.config.stem if args.config else run_dir.name)
    figures = summarise(run_dir)
    print(json.dumps({k: v for k, v in figures.items() if k != "per_step"}, indent=2))
    path = record(name, figures, {"command": command, "config": config},
                  publish=args.publish, measured_on=measured_on)
    if args.publish and (run_dir / "curves.png").exists():
        FIGURES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run_dir / "curves.png", FIGURES / f"{name}.png")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
