"""The ``ifeval`` verifier: IFEval's verifiable instructions (Zhou et al. 2023, "Instruction-
Following Evaluation for Large Language Models"), the constraints Tulu 3's RLVR trains on.

An item is a response and its instructions (``items``: three shapes); its score is the
fraction of them it follows (``all_or_nothing``: 1 or 0). The rules (``checks``) are lm-eval's
``instructions.py`` rewritten without NLTK's downloaded data (``sentences``) and without the
reference's backtracking regexes (``scans``): each is linear in the response. An item's cost
is what its rules read (``cost``: its response times its instructions, eight copies in loose
mode), and where it is checked follows from that:

* a request of at most ``INLINE_COST`` in all: on the event loop itself (milliseconds at
  worst, tests/reward_server/verifiers/ifeval/test_ifeval_bounds.py holds it to that);
* an item of at most ``ITEM_COST``: on this verifier's thread, a request's items in slices
  of ``SLICE_COST``, so other requests get the loop, and the thread, between;
* a costlier one (a long response, many instructions): in a worker process, through the
  slow lane (``reward_server.slow_lane``) under ``TIMEOUT_S``.

The counts that multiply the cost are capped per item (``settings.IfEvalSettings``).

Verdicts are cached by content (the response's digest, the instructions, the mode).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from reward_server import metrics
from reward_server.cache import ResultCache
from reward_server.fair_thread import FairThread
from reward_server.process_pool import TimeoutPool
from reward_server.slow_lane import Done, LaneVerdicts, SlowLane, Turn
from reward_server.statuses import NOT_RUN, UNAVAILABLE
from reward_server.verifiers.base import PooledVerifier
from reward_server.verifiers.ifeval import language
from reward_server.verifiers.ifeval.checks import INSTRUCTIONS
from reward_server.verifiers.ifeval.evaluate import cache_key, evaluate, evaluate_plain
from reward_server.verifiers.ifeval.items import (
    IfEvalItem,
    IfEvalResult,
    Instruction,
    Verdict,
)
from reward_server.verifiers.ifeval.settings import IfEvalSettings

__all__ = ["IfEvalItem", "IfEvalResult", "IfEvalVerifier", "Instruction"]

# Cost units: a character one rule reads in one copy of the response (a tokenizer's counts
# four, checks.Check.weight). The costliest rules take ~2 us a unit at worst, a regex scan
# ~0.05 (tests/reward_server/verifiers/ifeval/test_ifeval_bounds.py holds every rule to US_PER_UNIT)
INLINE_COST = 8192  # a request this cheap is checked on the event loop: ~15 ms at worst
ITEM_COST = 256 * 1024  # an item this cheap is checked in the server (~0.5 s at worst)
SLICE_COST = 256 * 1024  # per hand-off to the thread
LOOSE_COPIES = 8  # loose mode reads the response eight ways (evaluate.loose_variants)
RULE_CHARS = 64  # a rule's own overhead, in characters
PHRASE_COST = 4  # units a parameter's character costs: a keyword is compiled, then searched
# langdetect reads at most 10,000 characters, but samples them at a cost of its own: ~20 ms
# a text however short
LANGUAGE_COST = 16 * 1024
# A 2 MiB response takes seconds at worst in loose mode (eight copies, each pass linear);
# past this it is a timeout, scored 0: only a hostile response gets near it
TIMEOUT_S = 20.0
WORKERS = 1  # large responses are rare; one worker (and pebble's spare) stays cheap
MEMORY_MB = 1024
_THREAD = FairThread("ifeval-thread")
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
    settings_model = IfEvalSettings
    libraries = ("langdetect",)

    async def start(self) -> None:
        self._cache: ResultCache[Verdicts] = ResultCache(self.settings.cache_size)
        self._cache_lock = threading.Lock()  # the loop and the thread both use it
        # pebble starts the worker at the first large response: none, no process
        self._pool = TimeoutPool(WORKERS, MEMORY_MB, language.warm_up, name="ifeval-worker")
        self._lane: SlowLane[IfEvalResult] = SlowLane(
            self.name, self._pool.slots, 0, self.settings.timeout_memory_s, _LANE_VERDICTS)
        await asyncio.to_thread(language.warm_up)  # langdetect's profiles, a second

    async def verify(self, items: Sequence[IfEvalItem]) -> list[IfEvalResult]:  # type: ignore[override]
        results: list[IfEvalResult | None] = [None] * len(items)
        costs = [cost(item) for item in items]
        local = [k for k, c in enumerate(costs) if c <= ITEM_COST]
        remote = [k for k, c in enumerate(costs) if c > ITEM_COST]
        if sum(costs[k] for k in local) <= INLINE_COST:
            for k in local:
                results[k] = self.check_local(items[k])
        else:
            for piece in _slices(local, costs):
                done = await _THREAD.run(lambda p=piece: [self.check_local(items[k]) for k in p])
                for k, result in zip(piece, done, strict=True):
                    results[k] = result
        if remote:
            found = await asyncio.gather(*(self._check_remote(items[k]) for k in remote))
            for k, result in zip(remote, found, strict=True):
                results[k] = result
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
        key = await _THREAD.run(cache_key, item.response, item.specs, item.strict)
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


def cost(item: IfEvalItem) -> int:
    """What the item's rules read, in units of ``ITEM_COST``: each instruction (each entry
    of a keyword list) reads every copy of the response, each parameter's character costs
    ``PHRASE_COST``, a language check ``LANGUAGE_COST``."""
    reads = chars = fixed = 0
    for instruction_id, kwargs in item.specs:
        check = INSTRUCTIONS[instruction_id]
        reads += check.weight
        fixed += LANGUAGE_COST if check.needs_language else 0
        for value in kwargs.__dict__.values():
            if isinstance(value, str):
                chars += len(value)
            elif isinstance(value, list):
                reads += len(value) - 1
                chars += sum(map(len, value))
    copies = 1 if item.strict else LOOSE_COPIES
    return copies * ((len(item.response) + RULE_CHARS) * reads + PHRASE_COST * chars + fixed)


def _slices(indices: list[int], costs: list[int]) -> list[list[int]]:
    """``indices`` in runs of about ``SLICE_COST`` (at least one item each)."""
    out: list[list[int]] = [[]]
    total = 0
    for k in indices:
        if out[-1] and total + costs[k] > SLICE_COST:
            out.append([])
            total = 0
        out[-1].append(k)
        total += costs[k]
    return out if out[-1] else []


_LANE_VERDICTS: LaneVerdicts[IfEvalResult] = LaneVerdicts(
    cacheable=lambda r: False,  # the verifier caches verdicts itself, for every path
    remembered=lambda r, age_s: r.model_copy(update={"detail": (
        f"{r.detail} (the same response, {age_s:.0f} s ago; remembered, not run again)")}),
)
