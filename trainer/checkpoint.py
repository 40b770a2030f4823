"""Checkpoints: model (the float32 master weights), tokenizer, optimizer, scheduler, step, and
every rank's RNG states and data position, so that ``--resume`` continues the run where it
stopped. Rank 0 writes the shared part, each rank its own ``rank{N}.pt``; the folder is
renamed into place only when all are written."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / f"checkpoint-{step:06d}"


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest finished checkpoint. Not a ``.tmp`` folder: one is written (its state
    first) before it is renamed into place, so a run killed mid-save leaves one that looks
    whole and sorts after the finished ones."""
    done = sorted(p for p in run_dir.glob("checkpoint-*")
                  if p.name.removeprefix("checkpoint-").isdigit() and (p / STATE_FILE).exists())
    return done[-1] if done else None


def tmp_dir(run_dir: Path, step: int) -> Path:
    return checkpoint_dir(run_dir, step).with_name(checkpoint_dir(run_dir, step).name + ".tmp")


def save_shared(run_dir: Path, step: int, model: Any, tokenizer: Any,
                optimizer: torch.optim.Optimizer, scheduler: Any,
                weights: dict[str, Any] | None = None,
                optimizer_state: dict[str, Any] | None = None) -> Path:
    """Rank 0: the model, tokenizer, optimizer and scheduler, into the temporary folder.
    ``weights``/``optimizer_state``: whole states gathered from FSDP shards (else read from
    ``model`` and ``optimizer``). A LoRA model writes its adapter only."""
    tmp = tmp_dir(run_dir, step)
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=weights)
    tokenizer.save_pretrained(tmp)
    torch.save({"step": step, "scheduler": scheduler.state_dict(),
                "optimizer": optimizer.state_dict() if optimizer_state is None
                else optimizer_state}, tmp / STATE_FILE)
    return tmp


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}


def set_rng_state(rng: dict[str, Any]) -> None:
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        cuda = rng["cuda"]
        if isinstance(cuda, list):  # written by an older version: every device's state
            torch.cuda.set_rng_state_all(cuda)
        else:
            torch.cuda.set_rng_state(cuda)


def save_rank(run_dir: Path, step: int, rank: int, data_state: dict[str, int],
              rng: dict[str, Any] | None = None) -> None:
    """Every rank: its own RNG states (``rng``, else as they are now) and data position
    (ranks sample differently)."""
    torch.save({"data": data_state, "rng": rng_state() if rng is None else rng},
               tmp_dir(run_dir, step) / f"rank{rank}.pt")


def finish(run_dir: Path, step: int, keep: int = 2) -> Path:
    """Rank 0, after every rank has written: rename into place, drop old checkpoints."""
    final = checkpoint_dir(run_dir, step)
    shutil.rmtree(final, ignore_errors=True)
    tmp_dir(run_dir, step).rename(final)
    for old in sorted(run_dir.glob("checkpoint-*[0-9]"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save(run_dir: Path, step: int, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer,
         scheduler: Any, data_state: dict[str, int], keep: int = 2) -> Path:
    """One process: write to a temporary folder, then rename (a crash never leaves a half
    checkpoint). Under DDP the trainer calls the parts with barriers in between."""
    save_shared(run_dir, step, model, tokenizer, optimizer, scheduler)
    save_rank(run_dir, step, 0, data_state)
    return finish(run_dir, step, keep)


def load_state(path: Path, optimizer: torch.optim.Optimizer, scheduler: Any,
               load_optimizer: Callable[[dict[str, Any]], None] | None = None
               ) -> dict[str, Any]:
    """Optimizer and scheduler restored; returns the state with ``step``. ``load_optimizer``
    replaces ``optimizer.load_state_dict`` (FSDP puts a whole state into shards)."""
    state = torch.load(path / STATE_FILE, weights_only=False)
    (load_optimizer or optimizer.load_state_dict)(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return state


def load_rank(path: Path, rank: int, shared: dict[str, Any]) -> dict[str, int]:
    """This rank's RNG states restored; returns its data position. A checkpoint from fewer
    ranks (or an older version) has no file for this rank: rank 0's data position is used
    and the RNG is left as seeded."""
    own = path / f"rank{rank}.pt"
    if own.exists():
        state = torch.load(own, weights_only=False)
        set_rng_state(state["rng"])
        return state["data"]
    if "rng" in shared and rank == 0:
        set_rng_state(shared["rng"])
    if "data" in shared:
        return shared["data"]
    return torch.load(path / "rank0.pt", weights_only=False)["data"]
