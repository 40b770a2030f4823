"""Per-step metrics: a JSONL file (the record), a progress bar, and TensorBoard or W&B
through their own libraries when installed and asked for."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class RunLogger:
    FILE = "metrics.jsonl"

    def __init__(self, run_dir: Path, total_steps: int, initial_step: int = 0,
                 progress_bar: bool = True, report_to: list[str] = (),
                 config: dict[str, Any] | None = None, is_main: bool = True) -> None:
        self.path = run_dir / self.FILE
        self.is_main = is_main
        self._bar = None
        self._tb = None
        self._wandb = None
        if not is_main:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        if progress_bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total_steps, initial=initial_step, desc="GRPO", unit="step",
                             dynamic_ncols=True)
        if "tensorboard" in report_to:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:
                print("metrics: tensorboard is not installed; skipping it")
        if "wandb" in report_to:
            try:
                import wandb

                self._wandb = wandb.init(project="verifiable-rewards", dir=str(run_dir),
                                         config=config or {})
            except ImportError:
                print("metrics: wandb is not installed; skipping it")

    def log(self, step: int, values: dict[str, Any]) -> None:
        if not self.is_main:
            return
        record = {"step": step, **{k: _plain(v) for k, v in values.items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._bar is not None and step > 0:  # step 0 is the evaluation before training
            shown = {k: record[k] for k in ("reward", "accuracy", "kl", "completion_length")
                     if k in record and isinstance(record[k], float)}
            self._bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items()}, refresh=False)
            self._bar.update(1)
        if self._tb is not None:
            for k, v in record.items():
                if isinstance(v, int | float) and k != "step":
                    self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(record, step=step)

    def write(self, message: str) -> None:
        if not self.is_main:
            return
        if self._bar is not None:
            self._bar.write(message)
        else:
            print(message, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / RunLogger.FILE
    if not path.exists():
        raise FileNotFoundError(f"no {RunLogger.FILE} in {run_dir}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
