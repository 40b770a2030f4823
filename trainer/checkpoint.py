"""Checkpoints: model, tokenizer, optimizer, scheduler, RNG states, step and data position,
so that ``--resume`` continues the run where it stopped."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / f"checkpoint-{step:06d}"


def latest_checkpoint(run_dir: Path) -> Path | None:
    done = sorted(p for p in run_dir.glob("checkpoint-*") if (p / STATE_FILE).exists())
    return done[-1] if done else None


def save(run_dir: Path, step: int, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer,
         scheduler: Any, data_state: dict[str, int], keep: int = 2) -> Path:
    """Write to a temporary folder, then rename: a crash never leaves a half checkpoint."""
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save({
        "step": step,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "data": data_state,
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
    }, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(run_dir.glob("checkpoint-*[0-9]"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_state(path: Path, optimizer: torch.optim.Optimizer, scheduler: Any) -> dict[str, Any]:
    state = torch.load(path / STATE_FILE, weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    rng = state["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state
