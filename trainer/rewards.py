"""Scoring completions through the reward server, in the background.

Each completion becomes one item per configured verifier (its dataset row's columns travel
with it); all of a chunk's items go out as one mixed ``POST /v1/rewards`` batch through
``reward_server.client`` (batching, retries with backoff, a clear failure after N tries). The
total reward is the weighted sum (``combine_scores``).

A verifier's null means it could not score the item for a reason the completion did not cause
(no sandbox engine, a broken dataset test found before the candidate ran). Such a null must
neither reward nor punish the completion, and must not erase what the other verifiers said
about it (a wrong answer would buy itself advantage 0): the null takes the mean of that
verifier's scores in the completion's group, so it moves no advantage, and the total is NaN
(left out of the group baseline) only when every verifier is null.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from reward_server.client import RewardClient
from reward_server.rollout_log import RolloutLog
from trainer.config import RewardSpec

# Verifiers told which completions the length limit cut (their items take ``truncated``): the
# math verifier then pays no answer that runs into the cut (docs/trainer.md, "What the trainer
# sends"); the others read a cut completion as they read any other.
TRUNCATION_AWARE = frozenset({"math"})


class RewardError(RuntimeError):
    """A completion could not be turned into reward items (a missing dataset column)."""


@dataclass
class ScoredBatch:
    rewards: list[float]  # weighted sum per completion; NaN when unscorable
    per_verifier: dict[str, list[float | None]] = field(default_factory=dict)
    correct: list[bool] = field(default_factory=list)  # every verifier gave its full score

    @classmethod
    def concat(cls, batches: list[ScoredBatch]) -> ScoredBatch:
        return cls(
            rewards=[r for b in batches for r in b.rewards],
            per_verifier={k: [v for b in batches for v in b.per_verifier[k]]
                          for k in batches[0].per_verifier},
            correct=[x for b in batches for x in b.correct],
        )

    def select(self, index: list[int]) -> ScoredBatch:
        """The completions at ``index``, in that order."""
        return ScoredBatch([self.rewards[i] for i in index],
                           {k: [v[i] for i in index] for k, v in self.per_verifier.items()},
                           [self.correct[i] for i in index])

    def nulled(self, which: list[bool]) -> ScoredBatch:
        """This batch with the completions of ``which`` unscorable: NaN in the total (left out
        of the group baseline, no advantage), None in every column, never ``correct``."""
        return ScoredBatch(
            rewards=[math.nan if w else r for r, w in zip(self.rewards, which, strict=True)],
            per_verifier={k: [None if w else v for v, w in zip(col, which, strict=True)]
                          for k, col in self.per_verifier.items()},
            correct=[c and not w for c, w in zip(self.correct, which, strict=True)])

    def with_term(self, name: str, weight: float, values: list[float]) -> ScoredBatch:
        """This batch with a reward term the trainer computes itself (DAPO's overlong
        penalty: only the trainer knows token counts) added as ``weight * value``, and logged
        as its own column. It never decides ``correct``, and an unscorable completion stays
        unscorable (NaN): the term alone would give it a baseline from its length only."""
        if len(values) != len(self.rewards):
            raise ValueError(f"{len(values)} {name} values for {len(self.rewards)} completions")
        if name in self.per_verifier:
            raise ValueError(f"a reward column is already named {name!r}")
        return ScoredBatch(
            rewards=[r + weight * v for r, v in zip(self.rewards, values, strict=True)],
            per_verifier={**self.per_verifier, name: list(values)}, correct=list(self.correct))


def combine_scores(columns: list[tuple[float, list[float | None]]], group_size: int = 1
                   ) -> list[float]:
    """Σ_k weight_k · score_k per completion, from ``(weight, scores)`` per verifier; groups of
    ``group_size`` contiguous completions. A null is replaced by the mean of that verifier's
    scores in the group (0 if none scored); NaN where every verifier is null."""
    n = len(columns[0][1])
    if n % group_size:
        raise ValueError(f"{n} completions are not groups of {group_size}")
    total = [0.0] * n
    scored = [False] * n
    for weight, scores in columns:
        for start in range(0, n, group_size):
            group = scores[start : start + group_size]
            valid = [x for x in group if x is not None]
            fill = sum(valid) / len(valid) if valid else 0.0
            for i, x in enumerate(group, start):
                total[i] += weight * (fill if x is None else x)
                scored[i] = scored[i] or x is not None
    return [t if ok else math.nan for t, ok in zip(total, scored, strict=True)]


class RewardScorer:
    def __init__(self, specs: list[RewardSpec], client: RewardClient, max_workers: int = 4,
                 log: RolloutLog | None = None) -> None:
        """``log``: where every scored item goes with its result (``log_rollouts``)."""
        self.specs = specs
        self.client = client
        self.log = log
        self._threads = ThreadPoolExecutor(max_workers, thread_name_prefix="rewards")

    def items(self, texts: list[str], rows: list[dict[str, Any]],
              truncated: list[bool] | None = None) -> list[dict[str, Any]]:
        """One item per (verifier, completion). ``truncated``: per completion, whether
        ``max_completion_length`` cut it (no EOS); a cut one carries ``truncated: true`` to
        the verifiers that read it, so that an answer the cut ran into is never paid."""
        cut = truncated if truncated is not None else [False] * len(texts)
        if len(cut) != len(texts):
            raise ValueError(f"{len(cut)} truncation flags for {len(texts)} completions")
        out = []
        for spec in self.specs:
            for text, row, was_cut in zip(texts, rows, cut, strict=True):
                item: dict[str, Any] = {"verifier": spec.verifier, "response": text}
                if was_cut and spec.verifier in TRUNCATION_AWARE:
                    item["truncated"] = True
                for column, name in spec.columns.items():
                    if column not in row:
                        raise RewardError(f"reward {spec.verifier!r} needs the dataset column "
                                          f"{column!r}, which a row lacks: {sorted(row)}")
                    item[name] = row[column]
                item.update(spec.params)
                out.append(item)
        return out

    def score(self, texts: list[str], rows: list[dict[str, Any]], group_size: int = 1,
              truncated: list[bool] | None = None) -> ScoredBatch:
        """``group_size``: completions of one prompt, contiguous (G when training);
        ``truncated``: which ones the length limit cut (``Rollout.truncated``)."""
        n = len(texts)
        items = self.items(texts, rows, truncated)
        result = self.client.rewards(items)
        if self.log is not None:
            self.log.write(items, result)
        columns = [(spec.weight, result.rewards[k * n : (k + 1) * n])
                   for k, spec in enumerate(self.specs)]
        batch = ScoredBatch(rewards=combine_scores(columns, group_size), correct=[True] * n)
        for spec, (_, scores) in zip(self.specs, columns, strict=True):
            batch.per_verifier[spec.label] = scores
            for i, score in enumerate(scores):
                batch.correct[i] = batch.correct[i] and score is not None and score >= 1.0
        return batch

    def submit(self, texts: list[str], rows: list[dict[str, Any]], group_size: int = 1,
               truncated: list[bool] | None = None) -> Future[ScoredBatch]:
        return self._threads.submit(self.score, texts, rows, group_size, truncated)

    def close(self, wait: bool = True) -> None:
        """``wait`` False (an interrupted run): requests in flight are ended (the client's
        ``abort``), not waited for, and scoring not yet started is dropped; a slow or hung
        server would otherwise hold the run's exit for up to ``reward_timeout_s`` a try."""
        if not wait:
            self.client.abort()
        self._threads.shutdown(wait=wait, cancel_futures=True)


class Scorer(Protocol):
    """What the trainer needs of a reward source."""

    def score(self, texts: list[str], rows: list[dict[str, Any]], group_size: int = 1,
              truncated: list[bool] | None = None) -> ScoredBatch: ...

    def submit(self, texts: list[str], rows: list[dict[str, Any]], group_size: int = 1,
               truncated: list[bool] | None = None) -> Future[ScoredBatch]: ...

    def close(self, wait: bool = True) -> None:
        """Ends the scoring threads; ``wait`` False: without waiting for the scoring in
        hand (Ctrl-C)."""


def close_scorer(scorer: Scorer, wait: bool) -> None:
    """``scorer.close(wait)``; a scorer of the user's own written to the earlier protocol,
    whose ``close`` takes no ``wait``, is closed as it can be (its way, waiting) rather than
    failing the run's exit with a TypeError."""
    try:
        takes_wait = "wait" in inspect.signature(scorer.close).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): as the protocol says
        takes_wait = True
    if takes_wait:
        scorer.close(wait=wait)
    else:
        scorer.close()  # type: ignore[call-arg]


class FunctionScorer:
    """A local reward function ``f(completions, rows) -> list[float | None]`` in place of the
    server (tests, benchmarks against other trainers, quick experiments); one that also
    takes ``truncated`` gets, per completion, whether the length limit cut it, as the
    server's truncation-aware verifiers do."""

    def __init__(self, fn: Callable[..., list[float | None]], name: str = "local") -> None:
        self.fn, self.name = fn, name
        self._wants_cut = "truncated" in inspect.signature(fn).parameters
        self._threads = ThreadPoolExecutor(1, thread_name_prefix="rewards")

    def score(self, texts: list[str], rows: list[dict[str, Any]], group_size: int = 1,
              truncated: list[bool] | None = None) -> ScoredBatch:
        if self._wants_cut:
            cut = truncated if truncated is not None else [False] * len(texts)
            scores = self.fn(texts, rows, truncated=cut)
        else:
            scores = self.fn(texts, rows)  # one function: a null is the whole reward
        return ScoredBatch(
            rewards=[math.nan if s is None else float(s) for s in scores],
            per_verifier={self.name: list(scores)},
            correct=[s is not None and s >= 1.0 for s in scores])

    def submit(self, texts: list[str], rows: list[dict[str, Any]], group_size: int = 1,
               truncated: list[bool] | None = None) -> Future[ScoredBatch]:
        return self._threads.submit(self.score, texts, rows, group_size, truncated)

    def close(self, wait: bool = True) -> None:
        """``wait`` False: a call in hand is not waited for (nothing can end it), and
        those not started are dropped."""
        self._threads.shutdown(wait=wait, cancel_futures=not wait)
