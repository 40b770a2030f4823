"""A PNG of reward (total and per verifier), accuracy, KL and completion length over steps,
from any run dir; or several runs' curves on the same axes, to compare two settings (a run
with the code tool and the same run without it).

    grpo-plot runs/demo                                   # writes runs/demo/curves.png
    grpo-plot runs/tool runs/tool_off --out compare.png   # one line per run in each panel
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from trainer.metrics import read_metrics

PANELS = [
    ("reward", "reward (mean)", ["reward", "eval/accuracy"]),
    ("kl", "KL to reference", ["kl"]),
    ("length", "completion length", ["completion_length", "completion_length_max"]),
    ("clip", "clip fraction", ["clip_ratio/region_mean"]),
]


def _line(ax: Any, records: list[dict[str, Any]], key: str, label: str) -> None:
    """``key`` over steps, where logged."""
    points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    if points:
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3, label=label)


def _frame(ax: Any, title: str) -> None:
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)


def _save(fig: Any, plt: Any, title: str, out: Path) -> Path:
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.4))
    # each verifier's (or named spec's) column and the overlong penalty, beside the total
    columns = sorted({k for r in records for k in r if k.startswith("rewards/")
                      and k.endswith("/mean")})
    for ax, (panel, title, keys) in zip(axes, PANELS, strict=True):
        for key in keys + (columns if panel == "reward" else []):
            _line(ax, records, key, key)
        _frame(ax, title)
        if not ax.lines:
            ax.text(0.5, 0.5, "not logged in this run\n(e.g. KL needs beta > 0)",
                    ha="center", va="center", transform=ax.transAxes, fontsize=8, color="gray")
    return _save(fig, plt, f"GRPO run: {run_dir}", out or run_dir / "curves.png")


# compared runs: the figures two settings differ in, one line per run
COMPARED = [
    ("training reward (mean)", "reward"),
    ("held-out accuracy (greedy)", "eval/accuracy"),
    ("completion length", "completion_length"),
]


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    """Each run's ``COMPARED`` figures on shared axes, labelled by its directory's name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(run_dir.name, read_metrics(run_dir)) for run_dir in run_dirs]
    fig, axes = plt.subplots(1, len(COMPARED), figsize=(4.2 * len(COMPARED), 3.4))
    for ax, (title, key) in zip(axes, COMPARED, strict=True):
        for name, records in runs:
            _line(ax, records, key, name)
        _frame(ax, title)
    return _save(fig, plt, "GRPO runs: " + ", ".join(str(d) for d in run_dirs), out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="grpo-plot", description="Plot a GRPO run's metrics, "
                                 "or compare several runs' curves.")
    ap.add_argument("run_dirs", type=Path, nargs="+", metavar="run_dir")
    ap.add_argument("--out", type=Path, default=None, help="PNG path (default RUN/curves.png; "
                    "required with several runs)")
    args = ap.parse_args(argv)
    if len(args.run_dirs) > 1 and args.out is None:
        print("grpo-plot: --out: give the PNG path when comparing runs", file=sys.stderr)
        return 2
    try:
        if len(args.run_dirs) > 1:
            print(plot_runs(args.run_dirs, args.out))
        else:
            print(plot_run(args.run_dirs[0], args.out))
    except (FileNotFoundError, ValueError) as exc:
        print(f"grpo-plot: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
