"""Prompt datasets: JSONL files, lists of dicts, Hugging Face ``datasets``, the generated
arithmetic set of the demo, and reasoning-gym's tasks (``trainer.gym_tasks``). A
``PromptStream`` hands out prompts in a seeded order, epoch after epoch, sharded over ranks,
and remembers its position for ``--resume``."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer import gym_tasks

if TYPE_CHECKING:
    from trainer.config import GRPOConfig

Row = dict[str, Any]


def arithmetic_rows(n: int, seed: int, low: int = 1, high: int = 60) -> list[Row]:
    """``a + b`` questions with the answer; fixed seed, so the set is the same everywhere."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(low, high), rng.randint(low, high)
        rows.append({"prompt": f"What is {a} + {b}? Reply with only the number.",
                     "answer": str(a + b)})
    return rows


def load_rows(source: str | Sequence[Row] | Any, prompt_column: str = "prompt") -> list[Row]:
    """Rows from a JSONL path, a list of dicts, an HF Dataset, or a named generated set."""
    if isinstance(source, str):
        if gym_tasks.is_gym(source):  # the defaults; load_datasets reads a config's
            rows = gym_tasks.gym_rows(source, gym_tasks.DEFAULT_SIZE, gym_tasks.DEFAULT_SEED)
        elif source == "arithmetic":
            rows = arithmetic_rows(2000, seed=1234)
        elif source == "arithmetic-eval":
            rows = arithmetic_rows(200, seed=98765)
        else:
            rows = _read_jsonl(Path(source))
    elif hasattr(source, "column_names") and hasattr(source, "__getitem__"):
        rows = [dict(row) for row in source]  # a datasets.Dataset
    else:
        rows = [dict(row) for row in source]
    if not rows:
        raise ValueError(f"dataset {source!r} is empty")
    missing = [i for i, row in enumerate(rows) if prompt_column not in row]
    if missing:
        raise ValueError(f"dataset row {missing[0]} has no {prompt_column!r} column")
    return rows


def load_datasets(config: GRPOConfig) -> tuple[list[Row], list[Row] | None]:
    """The run's training rows and held-out rows (None without ``eval_dataset``). A
    ``reasoning_gym:`` held-out set is drawn apart from the training prompts
    (``gym_tasks.held_out_rows``): ``eval_samples`` entries, none of them a training question."""
    c = config
    if gym_tasks.is_gym(c.dataset):
        train = gym_tasks.gym_rows(c.dataset, c.dataset_size, c.dataset_seed, c.dataset_options)
    else:
        train = load_rows(c.dataset, c.prompt_column)
    if c.eval_dataset is None:
        return train, None
    if gym_tasks.is_gym(c.eval_dataset):
        seen = {str(row[c.prompt_column]) for row in train}
        held_out = gym_tasks.held_out_rows(c.eval_dataset, c.eval_samples, c.dataset_seed,
                                           seen, c.dataset_options)
        return train, held_out
    return train, load_rows(c.eval_dataset, c.prompt_column)


def _read_jsonl(path: Path) -> list[Row]:
    if not path.exists():
        raise FileNotFoundError(f"dataset not found: {path}")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: each line must be a JSON object")
            rows.append(row)
    return rows


class PromptStream:
    """Endless seeded order over ``rows``; this rank sees every ``world``-th prompt."""

    def __init__(self, rows: Sequence[Row], seed: int, rank: int = 0, world: int = 1) -> None:
        self.rows, self.seed, self.rank, self.world = list(rows), seed, rank, world
        self.position = 0  # prompts taken so far, over all ranks
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.rows)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._orders = {epoch: order}  # one epoch at a time is all we need
        return self._orders[epoch]

    def take(self, n: int) -> list[Row]:
        """The next ``n`` prompts of this rank (all ranks advance by ``n * world``)."""
        out: list[Row] = []
        for k in range(n * self.world):
            index = self.position + k
            epoch, offset = divmod(index, len(self.rows))
            if k % self.world == self.rank:
                out.append(self.rows[self._order(epoch)[offset]])
        self.position += n * self.world
        return out

    def state(self) -> dict[str, int]:
        return {"position": self.position, "seed": self.seed}

    def load_state(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


def write_jsonl(rows: Iterable[Row], path: Path) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
