"""The reasoning-gym library as a scorer calls it: its task names, and each task's own
``score_answer`` on an entry that came over JSON.

This module runs where the library is: in the sandbox (the image's /opt/scorers, called by
``sandbox/harness/scorer_server.py``), or in the host's worker processes where an operator
opted into host scoring. The server process imports it for its names only. ``guard`` is
installed first wherever it runs: the library's scorers would otherwise run the model's
answer as code (in the sandbox that is defence in depth; on the host it is all there is).
It needs nothing of the server but ``corrections`` and ``guard``: those three files are what
the image carries.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable
from typing import Any

from reward_server.verifiers.reasoning_gym import corrections

EXTRA_HINT = "pip install 'verifiable-rewards[reasoning-gym]'"


def warm_up(guarded: bool = True) -> None:
    """A scorer's start: import the library, guard it (unless a test asks to see the sandbox
    hold alone), and build one scorer (its caches). ImportError without the library."""
    import reasoning_gym  # noqa: F401  (imports every task module)

    if guarded:
        from reward_server.verifiers.reasoning_gym import guard

        guard.install()
    scorer("basic_arithmetic", "null")


def warm_up_worker() -> None:
    """A host worker's start (host scoring): ``warm_up``; without the library the verifier
    reports it at start (``task_names``)."""
    try:
        warm_up()
    except ImportError:
        return


@functools.cache  # once per task and process
def warm_task(task: str) -> None:
    """A task's default scorer built, then run on one entry the library generates itself (its
    own answer and a wrong one): the imports, regexes and caches a first score pulls in are
    then in the sandbox's fork server, and each chunk's child inherits them (a cold one pays
    ~1.5 ms an answer more). Nothing here is a caller's; any failure is the child's to meet
    on its own items."""
    try:
        score = scorer(task, "null")
        entry = type(score.__self__)(config=type(score.__self__.config)(size=1, seed=1))[0]
    except Exception:  # noqa: BLE001 - a task that needs a config (composite), or fails
        return
    for answer in (entry.get("answer"), "0"):
        try:
            score_one(task, answer if isinstance(answer, str) else str(answer),
                      json.loads(json.dumps(entry, default=str)))
        except Exception:  # noqa: BLE001
            pass


def task_names() -> list[str]:
    """Every task the installed library registers; ImportError without the extra."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


@functools.cache
def scorer(task: str, config: str = "null") -> Callable[[Any, dict[str, Any]], float]:
    """The task's ``score_answer``, from one dataset object per (task, config) and worker
    (building one can read data files). ``config``: JSON of the dataset's config, as the
    entries were generated with (several scorers read it: arc_agi's board format,
    decimal_arithmetic's places), or null for the library's default."""
    from reasoning_gym.factory import DATASETS

    dataset_cls, config_cls = DATASETS[task]
    fields = json.loads(config)
    if fields is None:
        return dataset_cls(config=config_cls()).score_answer
    return dataset_cls(config=_config(config_cls, fields)).score_answer


def _config(config_cls: type, fields: dict[str, Any]) -> Any:
    """``config_cls(**fields)``, a nested options object (a dataclass default given as an
    object) built as its own class."""
    defaults = config_cls()
    built = {}
    for name, value in fields.items():
        default = getattr(defaults, name, None)
        if isinstance(value, dict) and dataclasses.is_dataclass(default):
            value = type(default)(**value)
        built[name] = value
    return config_cls(**built)


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


# JSON has no tuples: where a task's scorer compares the parsed answer with a tuple in the
# entry's metadata, the entry gets its tuples back (checked for every task by
# tests/reward_server/verifiers/reasoning_gym/test_reasoning_gym.py, which scores each
# task's own answers).
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


def score_one(task: str, answer: str, entry: dict[str, Any], config: str = "null"
              ) -> tuple[str, float, str | None]:
    """``(status, score, detail)`` for one answer: ``ok`` with the library's score (with our
    ``corrections``), ``error`` (0) when its scorer raised on this answer but takes the
    entry's own answer, or ``bad_entry`` (null) when it raises on the entry's own answer
    too, or the config does not build: the row's fault."""
    entry = restored(task, entry)
    try:
        score_answer = scorer(task, config)
    except Exception as exc:  # noqa: BLE001 - a config the task's dataclass refuses
        return "bad_entry", math.nan, f"the task's config does not build: {exc!r}"[:500]
    try:
        score = corrections.score(task, answer, entry, score_answer)
    except Exception as exc:  # noqa: BLE001 - the library's, on text the model wrote
        try:
            score_answer(entry.get("answer"), entry)
        except Exception as own:  # noqa: BLE001
            return "bad_entry", math.nan, f"the task's scorer fails on this entry: {own!r}"[:500]
        return "error", 0.0, f"the task's scorer raised on this answer: {exc!r}"[:500]
    if -1e-9 <= score < 0.0 or 1.0 < score <= 1.0 + 1e-9:  # a sum of 1/n in floating point
        score = min(max(score, 0.0), 1.0)
    if not 0.0 <= score <= 1.0:
        return "bad_entry", math.nan, f"the task's scorer gave {score}, not a score in [0, 1]"
    return "ok", score, None


def score_many(jobs: list[tuple[str, str, dict[str, Any], str]]
               ) -> list[tuple[str, float, str | None]]:
    """``score_one`` for each (task, answer, entry, config) in one call: one hand-off to a
    worker for many items. The entry is the server's parsed JSON."""
    from reward_server.verifiers.reasoning_gym import guard

    guard.install()
    return [score_one(task, answer, entry, config) for task, answer, entry, config in jobs]
