"""The ``ifeval`` verifier: IFEval's verifiable instructions (Zhou et al. 2023, "Instruction-
Following Evaluation for Large Language Models"), the constraints Tulu 3's RLVR trains on.

An item is a response and its instructions (``items``: three shapes); its score is the
fraction of them it follows (``all_or_nothing``: 1 or 0). The rules (``checks``) are lm-eval's
``instructions.py`` rewritten without NLTK's downloaded data (``sentences``) and without the
reference's backtracking regexes (``scans``): each is linear in the response. Where an item
is checked:

* a response of up to ``IN_PROCESS_CHARS``: in the server process, inline for a small
  request and on this verifier's thread for a larger one (a batch's items all start in one
  turn of the event loop; a thread lets other requests in between);
* a longer one (up to the 2 MiB field limit): in a worker process, through the slow lane
  (``reward_server.slow_lane``) under ``TIMEOUT_S``: a regex pass over 2 MiB holds the
  interpreter for tens of milliseconds, and loose mode reads eight copies.

Verdicts are cached by content (the response's digest, the instructions, the mode).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from reward_server import metrics
from reward_server.cache import ResultCache
from reward_server.process_pool import TimeoutPool
from reward_server.slow_lane import Done, LaneVerdicts, SlowLane, Turn
from reward_server.statuses import NOT_RUN, UNAVAILABLE
from reward_server.verifiers.base import PooledVerifier
from reward_server.verifiers.ifeval import language
from reward_server.verifiers.ifeval.evaluate import cache_key, evaluate, evaluate_plain
from reward_server.verifiers.ifeval.items import (
    IfEvalItem,
    IfEvalResult,
    Instruction,
    Verdict,
)

__all__ = ["IfEvalItem", "IfEvalResult", "IfEvalVerifier", "Instruction"]

IN_PROCESS_CHARS = 64 * 1024  # about 10 ms of checks at worst; an essay is 5,000 characters
INLINE_REQUEST_CHARS = 8192  # a request this small is checked on the event loop itself
SLICE_ITEMS = 256  # items per hand-off to the thread
# A 2 MiB response takes seconds at worst in loose mode (eight copies, each pass linear);
# past this it is a timeout, scored 0: only a hostile response gets near it
TIMEOUT_S = 20.0
WORKERS = 1  # large responses are rare; one worker (and pebble's spare) stays cheap
MEMORY_MB = 1024
_THREAD = ThreadPoolExecutor(1, thread_name_prefix="ifeval")
Verdicts = tuple[bool | None, ...]


def _result(item: IfEvalItem, followed: Sequence[bool | None]) -> IfEvalResult:
    verdicts = [Verdict(instruction_id=i, followed=f)
                for (i, _), f in zip(item.specs, followed, strict=True)]
    if any(f is None for f in followed):
        return IfEvalResult(score=None, status=UNAVAILABLE, instructions=verdicts,
                            detail=language.MISSING)
    done = sum(1 for f in followed if f)
    score = float(done == len(followed)) if item.all_or_nothing else done / len(followed)
    detail = None if item.response.strip() else "empty response: follows nothing"
    return IfEvalResult(score=score, status="ok", instructions=verdicts, detail=detail)


def _lane_outcome(item: IfEvalItem, status: str, detail: str | None) -> IfEvalResult:
    verdicts = [Verdict(instruction_id=i, followed=None) for i, _ in item.specs]
    score = 0.0 if status == "timeout" else None
    return IfEvalResult(score=score, status=status, instructions=verdicts,  # type: ignore[arg-type]
                        detail=detail)


class IfEvalVerifier(PooledVerifier):
    name = "ifeval"
    item_model = IfEvalItem
    result_model = IfEvalResult
    description = ("IFEval's verifiable instructions (word counts, formats, keywords, case, "
                   "language): the fraction followed.")

    async def start(self) -> None:
        self._cache: ResultCache[Verdicts] = ResultCache(self.settings.cache_size)
        self._cache_lock = threading.Lock()  # the loop and the thread both use it
        # pebble starts the worker at the first large response: none, no process
        self._pool = TimeoutPool(WORKERS, MEMORY_MB, language.warm_up, name="ifeval-worker")
        self._lane: SlowLane[IfEvalResult] = SlowLane(
            self.name, self._pool.slots, 0, self.settings.timeout_memory_s, _LANE_VERDICTS)
        await asyncio.to_thread(language.warm_up)  # langdetect's profiles, a second

    async def verify(self, items: Sequence[IfEvalItem]) -> list[IfEvalResult]:  # type: ignore[override]
        started = time.perf_counter()
        results: list[IfEvalResult | None] = [None] * len(items)
        local = [k for k, item in enumerate(items) if len(item.response) <= IN_PROCESS_CHARS]
        remote = [k for k, item in enumerate(items) if len(item.response) > IN_PROCESS_CHARS]
        if sum(len(items[k].response) for k in local) <= INLINE_REQUEST_CHARS:
            for k in local:
                results[k] = self.check_local(items[k])
        else:
            loop = asyncio.get_running_loop()
            for start in range(0, len(local), SLICE_ITEMS):
                piece = local[start:start + SLICE_ITEMS]
                done = await loop.run_in_executor(
                    _THREAD, lambda p=piece: [self.check_local(items[k]) for k in p])
                for k, result in zip(piece, done, strict=True):
                    results[k] = result
        if remote:
            found = await asyncio.gather(*(self._check_remote(items[k]) for k in remote))
            for k, result in zip(remote, found, strict=True):
                results[k] = result
        elapsed = time.perf_counter() - started
        for result in results:
            assert result is not None
            metrics.ITEMS.labels(self.name, result.status).inc()
            metrics.ITEM_LATENCY.labels(self.name).observe(elapsed)
        return results  # type: ignore[return-value]

    def check_local(self, item: IfEvalItem) -> IfEvalResult:
        """The item's result, checked in this process (cached)."""
        key = cache_key(item.response, item.specs, item.strict) if self._cache.enabled else None
        with self._cache_lock:
            followed, hit = self._cache.peek(key)
        if not hit:
            followed = tuple(evaluate(item.response, item.specs, item.strict))
            if None not in followed and key is not None:
                with self._cache_lock:
                    self._cache.put(key, followed)
        (metrics.CACHE_HITS if hit else metrics.CACHE_MISSES).labels(self.name).inc()
        return _result(item, followed)  # type: ignore[arg-type]

    async def _check_remote(self, item: IfEvalItem) -> IfEvalResult:
        key = await asyncio.get_running_loop().run_in_executor(
            _THREAD, cache_key, item.response, item.specs, item.strict)
        with self._cache_lock:
            followed, hit = self._cache.peek(key)
        if hit:
            metrics.CACHE_HITS.labels(self.name).inc()
            return _result(item, followed)  # type: ignore[arg-type]
        return await self._lane.run(
            key, lambda turn: self._in_worker(item, key, turn),
            not_run=lambda reason: _lane_outcome(item, NOT_RUN, reason))

    async def _in_worker(self, item: IfEvalItem, key: object, turn: Turn) -> Done[IfEvalResult]:
        assert self._pool is not None, "IfEvalVerifier.start() was not awaited"
        plain = [(i, kw.model_dump()) for i, kw in item.specs]
        async with turn.slot() as held:
            task = await self._pool.run(evaluate_plain, item.response, plain, item.strict,
                                        timeout=TIMEOUT_S)
            held.cost_s = task.cost_s
        if task.outcome == "ok":
            followed = tuple(task.value)
            if None not in followed:
                with self._cache_lock:
                    self._cache.put(key, followed)
            return Done(_result(item, followed))
        if task.outcome in ("timeout", "memory"):
            metrics.TIMEOUTS.labels(self.name).inc()
            return Done(_lane_outcome(item, "timeout", task.detail),
                        timeout=True if task.outcome == "memory" else task.cpu_bound)
        if task.outcome == UNAVAILABLE:
            return Done(_lane_outcome(item, UNAVAILABLE, task.detail))
        return Done(_lane_outcome(item, "timeout", task.detail))  # crashed its worker twice


_LANE_VERDICTS: LaneVerdicts[IfEvalResult] = LaneVerdicts(
    cacheable=lambda r: False,  # the verifier caches verdicts itself, for every path
    remembered=lambda r, age_s: r.model_copy(update={"detail": (
        f"{r.detail} (the same response, {age_s:.0f} s ago; remembered, not run again)")}),
)
