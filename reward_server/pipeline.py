"""The per-item pipeline the core runs for every verifier, built-in or plug-in.

A verifier supplies its schemas and either a synchronous ``check(item)`` (the simple path) or
an async ``verify(items)`` (full control: math's triage, the code verifier's containers).
What every verifier needs besides is written here once:

- ``CheckLane``, for a verifier that supplies ``check``: each item runs in a worker process
  under the verifier's time and memory limits (``process_pool.TimeoutPool``), behind the
  slow lane (``slow_lane.SlowLane``: the result cache, remembered timeouts, the fair gate
  between callers, the request's budget and ``not_run``). A check that loops, eats memory
  or raises on a hostile completion costs that completion a 0 with a status, never the
  event loop, another caller's turn or the batch.
- ``finish``, for every verifier's results: the one null rule (``statuses.score_for``) and
  the metrics (items by status, latency), so a plug-in's items are counted on ``/metrics``
  as the built-ins' are.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import Field

from reward_server import check_worker, metrics
from reward_server.item_log import SHOWN_CHARS, Throttled, quoted
from reward_server.process_pool import TaskResult, TimeoutPool
from reward_server.slow_lane import Done, LaneVerdicts, SlowLane, Turn
from reward_server.statuses import NOT_RUN, NULL_STATUSES, UNAVAILABLE, score_for
from reward_server.verifiers.base import ItemBase, ResultBase

if TYPE_CHECKING:
    from reward_server.verifiers.base import Verifier

log = logging.getLogger("reward_server.pipeline")

# The statuses the pipeline itself gives an item a check could not score: its own words,
# whatever the verifier's result model spells
TIMEOUT = "timeout"  # the check ran past the verifier's time limit on this item (0)
MEMORY_LIMIT = "memory_limit"  # it ran past the verifier's memory limit (0)
CHECK_FAILED = "check_failed"  # it raised, or ended its worker, on this item (0)
# What a plug-in's cached results may hold in all, and one request's: a result may be up
# to check_worker.RESULT_MAX_BYTES, the cache has room for 100,000 of them and a request
# for 8,192, each kept until the response is sent. A request's room is shared out evenly,
# at least ITEM_RESULT_BYTES an item: whether an item's result fits depends on that item
# alone, never on which of its neighbours finished first
CACHE_BYTES = 64 << 20
REQUEST_RESULT_BYTES = 16 << 20
ITEM_RESULT_BYTES = 2 << 10
PipelineStatus = Literal["not_run", "timeout", "memory_limit", "check_failed", "unavailable"]


class PipelineResult(ResultBase):
    """The result of an item whose check the pipeline stopped or could not run."""

    score: float | None = Field(description="0 for timeout, memory_limit and check_failed "
                                "(the item caused them); null for not_run and unavailable.")
    status: PipelineStatus
    detail: str = Field(description="What happened, e.g. 'exceeded 5 s; stopped in its "
                        "worker'.")


class Pipeline:
    """One verifier's way through the core: its ``check`` in a ``CheckLane``, or its own
    ``verify``; then ``finish``."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier
        self.lane: CheckLane | None = None

    async def start(self) -> None:
        if type(self.verifier).checks():
            self.lane = CheckLane(self.verifier)

    async def stop(self) -> None:
        lane, self.lane = self.lane, None
        if lane is not None:
            await lane.close()

    async def verify(self, items: Sequence[ItemBase], started: float) -> list[ResultBase]:
        """``items``' results, in order (``started``: when they were admitted)."""
        if self.lane is not None:
            results = await self.lane.verify(items)
        else:
            results = await self.verifier.verify(items)
        if len(results) != len(items):  # a verifier's bug: no item gets another's result
            raise RuntimeError(f"verifier {self.verifier.name} returned {len(results)} "
                               f"results for {len(items)} items")
        return finish(self.verifier, results, started)


_NO_SCORE: dict[str, Throttled] = {}  # per verifier: a null its check returned, logged


def finish(verifier: Verifier, results: Sequence[ResultBase], started: float
           ) -> list[ResultBase]:
    """``results`` under the one null rule, counted on ``/metrics``: each item's status and
    the time since its request's items were admitted (``started``, ``time.perf_counter``).
    Counted once per status per request: a labelled ``inc()`` per item costs what a format
    rule does."""
    out = []
    for result in results:
        score = score_for(result.status, result.score, verifier.null_statuses)
        if score is not result.score:
            if result.score is None or result.score != result.score:
                _NO_SCORE.setdefault(verifier.name, Throttled(log)).warning(
                    "verifier %s gave no score with status %s: scored 0 (only a null status "
                    "may be null)", verifier.name, quoted(str(result.status)))
            result = result.model_copy(update={"score": score})
        out.append(result)
    for status, count in Counter(result.status for result in out).items():
        metrics.count_items(verifier.name, status, count)
    latency, elapsed = metrics.ITEM_LATENCY.labels(verifier.name), time.perf_counter() - started
    for _ in out:
        latency.observe(elapsed)
    return out


class CheckLane:
    """Runs a verifier's ``check`` for each item in worker processes, behind the slow lane.

    ``check`` runs in a worker, on an instance of the verifier made there from the server's
    settings: it may use the item, ``self.settings`` and ``self.config``, not what
    ``start`` made in the server process. An item's cache key is its JSON's digest
    (``ItemBase.check_key``, made where it was admitted)."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier
        cls = type(verifier)
        settings = verifier.settings
        self.timeout_s = cls.check_timeout_s
        # a check's CPU time: about its time limit (whole seconds, as RLIMIT_CPU counts)
        self.cpu_limit_s = max(1, math.ceil(self.timeout_s))
        self.pool = TimeoutPool(cls.check_workers or settings.check_workers,
                                cls.check_memory_mb,
                                functools.partial(check_worker.load, cls, settings.sections,
                                                  _worker_settings(verifier)),
                                name=f"{verifier.name}-check", signal_others=True)
        self.pool.prestart()
        self.failures = Throttled(log)
        self.lane: SlowLane[ResultBase] = SlowLane(
            verifier.name, self.pool.slots, settings.cache_size, settings.timeout_memory_s,
            _LANE_VERDICTS, cache_bytes=(CACHE_BYTES, _json_bytes))

    async def verify(self, items: Sequence[ItemBase]) -> list[ResultBase]:
        share = max(ITEM_RESULT_BYTES, REQUEST_RESULT_BYTES // max(1, len(items)))
        return list(await asyncio.gather(*(self._one(item, share) for item in items)))

    async def _one(self, item: ItemBase, share: int) -> ResultBase:
        result = await self.lane.run(
            item.check_key(), lambda turn: self._check(item, turn),
            not_run=lambda reason: PipelineResult(score=None, status=NOT_RUN, detail=reason))
        if _json_bytes(result) > share:  # the completion made its result large: its 0
            return self._failed(f"its result is over its share of this request's results "
                                f"({share} bytes: {REQUEST_RESULT_BYTES} over the items)")
        return result

    async def _check(self, item: ItemBase, turn: Turn) -> Done[ResultBase]:
        async with turn.slot() as held:
            task: TaskResult = await self.pool.run(check_worker.run, item, self.cpu_limit_s,
                                                   timeout=self.timeout_s)
            held.cost_s = task.cost_s  # its own work, not a replacement worker's start
        outcome, detail = task.value if task.outcome == "ok" else (task.outcome, task.detail)
        if outcome == check_worker.OK:
            return Done(self._result(detail))
        # why there is no result is a line, the child's (the item's) at most: kept for the
        # timeout memory and the response, so never its 64 KB
        detail = (detail or outcome)[:SHOWN_CHARS]
        if outcome == "timeout":
            metrics.TIMEOUTS.labels(self.verifier.name).inc()
            return Done(PipelineResult(score=0.0, status=TIMEOUT, detail=detail),
                        timeout=task.cpu_bound)
        if outcome == check_worker.CPU:  # its threads used the CPU time: its own work
            metrics.TIMEOUTS.labels(self.verifier.name).inc()
            return Done(PipelineResult(score=0.0, status=TIMEOUT, detail=detail), timeout=True)
        if outcome == check_worker.MEMORY:
            return Done(PipelineResult(score=0.0, status=MEMORY_LIMIT, detail=detail),
                        timeout=True)
        if outcome == UNAVAILABLE:  # its workers were lost from outside: not the item's
            return Done(PipelineResult(score=None, status=UNAVAILABLE, detail=detail))
        return Done(self._failed(detail))

    def _result(self, sent: str) -> ResultBase:
        """The check's result from its JSON, if it is one: valid for the verifier's model,
        a score that is a reward (null, or finite in [0, 1]) and none of the words the core
        keeps for itself (a check cannot say it was not run)."""
        try:
            result = self.verifier.result_model.model_validate_json(sent)
        except Exception as exc:  # noqa: BLE001 - a plug-in's validator may raise anything
            return self._failed(f"check returned an invalid result: {_text(exc)}")
        score = result.score
        if score is not None and not (isinstance(score, float | int) and 0.0 <= score <= 1.0):
            return self._failed(f"check returned the score {str(score)[:50]}, not one in [0, 1]")
        if result.status in NULL_STATUSES or result.status in get_args(PipelineStatus):
            return self._failed(f"check returned the status {result.status!r}, which only "
                                "the server gives")
        return result

    def _failed(self, detail: str) -> PipelineResult:
        # raised on this item: the item's doing as far as anyone can tell (a plug-in's bug
        # that every item hits shows in the log and on /metrics, not as nulls)
        self.failures.warning("verifier %s: check failed on an item: %s", self.verifier.name,
                              quoted(detail))
        return PipelineResult(score=0.0, status=CHECK_FAILED, detail=detail[:SHOWN_CHARS])

    async def close(self) -> None:
        await asyncio.to_thread(self.pool.close)


_LANE_VERDICTS: LaneVerdicts[ResultBase] = LaneVerdicts(
    cacheable=lambda r: r.status not in (TIMEOUT, MEMORY_LIMIT, UNAVAILABLE),
    remembered=lambda r, age_s: r.model_copy(update={"detail": (
        f"{getattr(r, 'detail', '')} (the same item, {age_s:.0f} s ago; remembered, not run "
        "again)").lstrip()}),
)


def _json_bytes(result: ResultBase) -> int:
    return len(result.model_dump_json())


def _text(exc: Exception) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"[:200]
    except Exception:  # noqa: BLE001 - a __str__ that raises says nothing more
        return type(exc).__name__


def _worker_settings(verifier: Verifier) -> dict[str, Any]:
    """The settings a check's worker gets, as JSON: the server's secrets masked (a check has
    no use for its tokens), the verifier's own section as set (its own secrets included)."""
    data = verifier.settings.model_dump(mode="json")
    if verifier.settings_model is not None:
        prefix = verifier.settings_prefix or verifier.name
        revealed = verifier.settings.dump_secret()
        for field in verifier.settings_model.model_fields:
            data[f"{prefix}_{field}"] = revealed[f"{prefix}_{field}"]
    return data
