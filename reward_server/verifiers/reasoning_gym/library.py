"""The reasoning-gym library as the scoring workers call it: its task names, and each task's
own ``score_answer`` on an entry that came over JSON.

Only the workers import the library (60 MB and a second of imports the server process does
without), and each installs ``guard`` first: the library's scorers would otherwise run the
model's answer as code. Everything here runs in a worker; the server process imports this
module for its names only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

EXTRA_HINT = "pip install 'verifiable-rewards[reasoning-gym]'"


def warm_up() -> None:
    """The worker's start: import the library, guard it, and build one scorer (its caches)."""
    try:
        from reward_server.verifiers.reasoning_gym import guard

        guard.install()
    except ImportError:  # the verifier reports it at start (task_names)
        return
    scorer("basic_arithmetic")


def task_names() -> list[str]:
    """Every task the installed library registers; ImportError without the extra."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


@functools.cache
def scorer(task: str) -> Callable[[Any, dict[str, Any]], float]:
    """The task's ``score_answer``, from one dataset object per task and worker (building
    one can read data files)."""
    from reasoning_gym import get_score_answer_fn

    return get_score_answer_fn(task)


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


# JSON has no tuples: where a task's scorer compares the parsed answer with a tuple in the
# entry's metadata, the entry gets its tuples back (checked for every task by
# tests/reward_server/test_reasoning_gym.py, which scores each task's own answers).
_TUPLE_FIELDS: dict[str, tuple[str, ...]] = {
    "arc_agi": ("output", "input"),
    "rearc": ("output", "input"),
}


def restored(task: str, entry: dict[str, Any]) -> dict[str, Any]:
    fields = _TUPLE_FIELDS.get(task)
    metadata = entry.get("metadata")
    if not fields or not isinstance(metadata, dict):
        return entry
    metadata = {k: _tuples(v) if k in fields else v for k, v in metadata.items()}
    return {**entry, "metadata": metadata}


def score_one(task: str, answer: str, entry: dict[str, Any]) -> tuple[str, float, str | None]:
    """``(status, score, detail)`` for one answer: ``ok`` with the library's score, ``error``
    (0) when its scorer raised on this answer but takes the entry's own answer, or
    ``bad_entry`` (null) when it raises on the entry's own answer too: the row's fault."""
    entry = restored(task, entry)
    score_answer = scorer(task)
    try:
        score = float(score_answer(answer, entry))
    except Exception as exc:  # noqa: BLE001 - the library's, on text the model wrote
        try:
            score_answer(entry.get("answer"), entry)
        except Exception as own:  # noqa: BLE001
            return "bad_entry", math.nan, f"the task's scorer fails on this entry: {own!r}"[:500]
        return "error", 0.0, f"the task's scorer raised on this answer: {exc!r}"[:500]
    if not 0.0 <= score <= 1.0:
        return "bad_entry", math.nan, f"the task's scorer gave {score}, not a score in [0, 1]"
    return "ok", score, None


def score_many(jobs: list[tuple[str, str, dict[str, Any]]]
               ) -> list[tuple[str, float, str | None]]:
    """``score_one`` for each job, in one call (one hand-off to a worker for many items)."""
    from reward_server.verifiers.reasoning_gym import guard

    guard.install()
    return [score_one(*job) for job in jobs]
