"""The ``format`` verifier: the structure rewards RLVR recipes add beside accuracy.

Where an item's rules are checked:

* the built-in rules (linear scans, ``rules``): in the server, inline for a request whose
  rules read at most ``INLINE_COST`` characters in all (a few milliseconds at worst), and on
  this verifier's thread for a larger one, in slices of ``SLICE_COST``, so other requests
  get the loop, and the thread, between;
* a caller's ``regex``: compiled, then searched, in a worker process (``patterns``): each
  distinct pattern once, then the searches, a chunk at a time through the slow lane (its fair
  gate shares the workers between requests, its memory answers a repeated timeout at once).
  A chunk that runs out of time is run again one at a time, so only the hostile one times
  out: a search that does its rule fails (timeout, 0); a pattern that does not compile, or
  compiles past the limit, makes its item invalid_item (null: the caller's pattern, not the
  completion, is at fault).

Results are cached by content (the text's digest, the rules, the scoring), timeouts not;
compiled patterns' verdicts by pattern.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

from reward_server import metrics
from reward_server.cache import ResultCache
from reward_server.fair_thread import FairThread
from reward_server.process_pool import TimeoutPool
from reward_server.slow_lane import NOT_RUN, Done, LaneVerdicts, SlowLane, Turn
from reward_server.verifiers.base import PooledVerifier
from reward_server.verifiers.format import patterns
from reward_server.verifiers.format.evaluate import (
    Pending,
    check,
    combine,
    invalid,
    regex_verdict,
)
from reward_server.verifiers.format.items import FormatItem, FormatResult, RuleVerdict
from reward_server.verifiers.format.settings import FormatSettings

# A rule reads its item's text once or a few times: a request's cost is the characters its
# rules read, sum(rules * (text + RULE_CHARS)), the constant a rule's own overhead (~10 us).
# The worst text (fence runs) costs ~160 ns a rule-character
# (tests/reward_server/verifiers/format/test_format_bounds.py holds it to that).
RULE_CHARS = 64
INLINE_COST = 64 * 1024  # checked on the event loop itself: ~10 ms at worst
# per hand-off to the thread (~170 ms at worst, ~15 ms for an honest text): a request of
# many long responses goes in slices, and another request's slice gets the thread between
SLICE_COST = 1 << 20
_THREAD = FairThread("format-thread")


class Searched(NamedTuple):
    """One regex search's outcome in the worker."""

    status: str  # ok, timeout, not_run, unavailable
    found: patterns.Found = None
    detail: str | None = None


# a chunk's outcome: one Searched per search, or None: it ran out of time, search each alone
Chunk = list[Searched] | None


class Checked(NamedTuple):
    """An item after the in-process pass: its result, or its verdicts and pending searches."""

    key: Hashable  # in the result cache; None when the cache is off
    hit: bool
    # the result, or the verdicts so far, the pending searches and each search's key
    state: FormatResult | tuple[list[RuleVerdict | None], list[Pending], list[Hashable]]


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class FormatVerifier(PooledVerifier):
    name = "format"
    item_model = FormatItem
    result_model = FormatResult
    description = ("Structure rewards: R1's <think>/<answer> format (open-r1's format_reward, "
                   "TRL's think_format_reward), open-r1's tag counts, a required final-answer "
                   "form (\\boxed{}, an Answer: line, or your regex).")
    settings_model = FormatSettings
    capacity_settings = frozenset({"workers", "chunk_items"})

    async def start(self) -> None:
        config: FormatSettings = self.config  # type: ignore[assignment]
        self._cache: ResultCache[FormatResult] = ResultCache(self.settings.cache_size)
        self._cache_lock = threading.Lock()  # the loop and the thread both use it
        # pebble starts the worker at the first regex: none asked for, no process
        self._pool = TimeoutPool(config.workers, config.memory_mb, patterns.warm_up,
                                 name="format-worker")
        self._lane: SlowLane[Chunk] = SlowLane(
            self.name, self._pool.slots, 0, self.settings.timeout_memory_s, _LANE_VERDICTS)

        self._compiled: ResultCache[Searched] = ResultCache(self.settings.cache_size)

    async def verify(self, items: Sequence[FormatItem]) -> list[FormatResult]:  # type: ignore[override]
        if sum(map(cost, items)) <= INLINE_COST:
            checked = [self._check(item) for item in items]
        else:
            checked = []
            for piece in _slices(items):
                checked += await _THREAD.run(lambda p=piece: [self._check(item) for item in p])
        results = await self._searched(items, checked)
        # counted once per request: a rule costs microseconds, a labelled inc() one more
        hits = sum(1 for _, hit, _ in checked if hit)
        metrics.CACHE_HITS.labels(self.name).inc(hits)
        metrics.CACHE_MISSES.labels(self.name).inc(len(items) - hits)
        return results

    def _check(self, item: FormatItem) -> Checked:
        """The item's cache key, whether it was cached, and its result or what is pending."""
        key = (_digest(item.text), tuple(item.rules), item.all_or_nothing) \
            if self._cache.enabled else None
        with self._cache_lock:
            cached, hit = self._cache.peek(key)
        if hit:
            return Checked(key, True, cached)  # type: ignore[arg-type]
        verdicts, pending = check(item)
        if pending:  # keys here: a digest of a long text belongs off the event loop
            return Checked(key, False, (verdicts, pending, [_search_key(p.search)
                                                            for p in pending]))
        result = combine(item, verdicts)  # type: ignore[arg-type]
        self._put(key, result)
        return Checked(key, False, result)

    def _put(self, key: Hashable, result: FormatResult) -> None:
        if key is not None and result.status == "ok":  # a timeout may be the machine's load
            with self._cache_lock:
                self._cache.put(key, result)

    async def _searched(self, items: Sequence[FormatItem], checked: list[Checked]
                        ) -> list[FormatResult]:
        """Every result, the pending regexes compiled and searched (each distinct one once)."""
        searches: dict[Hashable, patterns.Search] = {}
        for _, _, state in checked:
            if not isinstance(state, FormatResult):
                for (_, search), search_key in zip(state[1], state[2], strict=True):
                    searches.setdefault(search_key, search)
        compiled = await self._compile({(s.pattern, s.flags) for s in searches.values()})
        runnable = [(key, search) for key, search in searches.items()
                    if compiled[search.pattern, search.flags].status == "ok"]
        outcomes = dict(zip((key for key, _ in runnable), await self._in_chunks(
            patterns.search_many, runnable, _found), strict=True))
        results = []
        for item, (key, _, state) in zip(items, checked, strict=True):
            if isinstance(state, FormatResult):
                results.append(state)
                continue
            verdicts, pending, search_keys = state
            for (k, search), search_key in zip(pending, search_keys, strict=True):
                name, built = item.rules[k].name, compiled[search.pattern, search.flags]
                verdicts[k] = (_rule_verdict(name, search, outcomes[search_key])
                               if built.status == "ok" else _compile_verdict(name, k, built))
            result = combine(item, verdicts)  # type: ignore[arg-type]
            self._put(key, result)
            results.append(result)
        return results

    async def _compile(self, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], Searched]:
        """Each (pattern, flags)'s compile outcome: ok, invalid (why), or as a lane's."""
        out: dict[tuple[str, str], Searched] = {}
        for pair in pairs:
            found, hit = self._compiled.peek(pair)
            if hit:
                out[pair] = found  # type: ignore[assignment]
        todo = [(("compile", *pair), pair) for pair in pairs if pair not in out]
        for (_, pair), built in zip(todo, await self._in_chunks(
                patterns.compile_many, todo, _built), strict=True):
            out[pair] = built
            if built.status in ("ok", "invalid"):  # the pattern's own, not the moment's
                self._compiled.put(pair, built)
        return out

    async def _in_chunks(self, fn: Callable[[list[Any]], list[Any]],
                         jobs: list[tuple[Hashable, Any]], convert: Callable[[Any], Searched]
                         ) -> list[Searched]:
        """Each (key, job)'s outcome, in order: ``fn`` over chunks of jobs in the worker."""
        size = self.config.chunk_items  # type: ignore[union-attr]
        chunks = [jobs[i:i + size] for i in range(0, len(jobs), size)]
        done = await asyncio.gather(*(self._chunk(fn, chunk, convert) for chunk in chunks))
        return [one for chunk in done for one in chunk]

    async def _chunk(self, fn: Callable[[list[Any]], list[Any]],
                     chunk: list[tuple[Hashable, Any]], convert: Callable[[Any], Searched]
                     ) -> list[Searched]:
        keys = tuple(key for key, _ in chunk)
        jobs = [job for _, job in chunk]
        outcome = await self._lane.run(
            keys if len(keys) > 1 else keys[0],
            lambda turn: self._in_worker(fn, jobs, convert, turn),
            not_run=lambda reason: [Searched(NOT_RUN, None, reason)] * len(jobs))
        if outcome is not None:
            return outcome
        # which job it was: each alone, under its own limit
        return [one for alone in await asyncio.gather(
            *(self._chunk(fn, [one], convert) for one in chunk)) for one in alone]

    async def _in_worker(self, fn: Callable[[list[Any]], list[Any]], jobs: list[Any],
                         convert: Callable[[Any], Searched], turn: Turn) -> Done[Chunk]:
        assert self._pool is not None, "FormatVerifier.start() was not awaited"
        async with turn.slot() as held:
            task = await self._pool.run(fn, jobs,
                                        timeout=self.config.timeout_s)  # type: ignore[union-attr]
            held.cost_s = task.cost_s
        if task.outcome == "ok":
            return Done([convert(value) for value in task.value])
        if task.outcome == "unavailable":  # the pool's loss: no job's doing
            return Done([Searched("unavailable", None, task.detail)] * len(jobs))
        if len(jobs) > 1:
            return Done(None)
        metrics.TIMEOUTS.labels(self.name).inc()
        detail = f"ran out of time ({task.outcome}): {task.detail}"
        return Done([Searched("timeout", None, detail)],
                    timeout=task.cpu_bound if task.outcome == "timeout" else True)


def cost(item: FormatItem) -> int:
    """The characters the item's rules read (``RULE_CHARS`` a rule for its own overhead)."""
    return len(item.rules) * (len(item.text) + RULE_CHARS)


def _slices(items: Sequence[FormatItem]) -> list[Sequence[FormatItem]]:
    """``items`` in runs of about ``SLICE_COST`` (at least one item each)."""
    out, start, total = [], 0, 0
    for k, item in enumerate(items):
        total += cost(item)
        if total >= SLICE_COST:
            out.append(items[start:k + 1])
            start, total = k + 1, 0
    return out + [items[start:]] if start < len(items) else out


def _found(found: patterns.Found) -> Searched:
    return Searched("ok", found)


def _built(problem: str | None) -> Searched:
    return Searched("ok") if problem is None else Searched("invalid", None, problem)


def _search_key(search: patterns.Search) -> Hashable:
    pattern, flags, text = search
    return pattern, flags, _digest(text)


def _rule_verdict(name: str, search: patterns.Search, searched: Searched) -> RuleVerdict:
    if searched.status == "ok":
        return regex_verdict(name, search, searched.found)
    score = 0.0 if searched.status == "timeout" else None
    detail = f"the regex search {searched.detail}" if searched.status == "timeout" \
        else searched.detail
    return RuleVerdict(rule=name, score=score, passed=None if score is None else False,
                       status=searched.status, reason=detail)  # type: ignore[arg-type]


def _compile_verdict(name: str, index: int, built: Searched) -> RuleVerdict:
    """A pattern that did not compile in time is the caller's, whatever the text: null."""
    if built.status == "invalid":
        return invalid(name, index, built.detail or "does not compile")
    if built.status == "timeout":
        return invalid(name, index, f"compiling it {built.detail}; no final-answer pattern "
                       "takes that long")
    return RuleVerdict(rule=name, score=None, passed=None, status=built.status,  # type: ignore[arg-type]
                       reason=built.detail)


_LANE_VERDICTS: LaneVerdicts[Chunk] = LaneVerdicts(
    cacheable=lambda chunk: False,  # the verifier caches results itself
    remembered=lambda chunk, age_s: None if chunk is None else [s._replace(detail=(
        f"{s.detail} (the same search, {age_s:.0f} s ago; remembered, not run again)"))
        for s in chunk],
)
