"""The ``format`` verifier: the structure rewards RLVR recipes add beside accuracy.

Where an item's rules are checked:

* the built-in rules (linear scans, ``rules``): in the server, inline for a small request
  and on this verifier's thread for a larger one, so other requests get the loop between;
* a caller's ``regex``: in a worker process (``patterns``), a request's searches a chunk at
  a time through the slow lane (its fair gate shares the workers between requests, its
  memory answers a repeated timeout at once). A chunk that runs out of time is searched again
  one search at a time, so only the hostile search times out (its rule 0).

Results are cached by content (the text's digest, the rules, the scoring), timeouts not.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from reward_server import metrics
from reward_server.cache import ResultCache
from reward_server.process_pool import TimeoutPool
from reward_server.slow_lane import NOT_RUN, Done, LaneVerdicts, SlowLane, Turn
from reward_server.verifiers.base import PooledVerifier
from reward_server.verifiers.format import patterns
from reward_server.verifiers.format.evaluate import (
    Pending,
    check,
    combine,
    regex_verdict,
)
from reward_server.verifiers.format.items import FormatItem, FormatResult, RuleVerdict
from reward_server.verifiers.format.settings import FormatSettings

INLINE_REQUEST_CHARS = 16 * 1024  # a request this small is checked on the event loop itself
# text per hand-off to the thread (about 10 ms of rules): a request of many long responses
# goes in slices, and another request's slice gets the thread between two of them
SLICE_CHARS = 1 << 20
_THREAD = ThreadPoolExecutor(1, thread_name_prefix="format")


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

    async def start(self) -> None:
        config: FormatSettings = self.config  # type: ignore[assignment]
        self._cache: ResultCache[FormatResult] = ResultCache(self.settings.cache_size)
        self._cache_lock = threading.Lock()  # the loop and the thread both use it
        # pebble starts the worker at the first regex: none asked for, no process
        self._pool = TimeoutPool(config.workers, config.memory_mb, patterns.warm_up,
                                 name="format-worker")
        self._lane: SlowLane[Chunk] = SlowLane(
            self.name, self._pool.slots, 0, self.settings.timeout_memory_s, _LANE_VERDICTS)

    async def verify(self, items: Sequence[FormatItem]) -> list[FormatResult]:  # type: ignore[override]
        started = time.perf_counter()
        if sum(len(item.text) for item in items) <= INLINE_REQUEST_CHARS:
            checked = [self._check(item) for item in items]
        else:
            loop = asyncio.get_running_loop()
            checked = []
            for piece in _slices(items):
                checked += await loop.run_in_executor(
                    _THREAD, lambda p=piece: [self._check(item) for item in p])
        results = await self._searched(items, checked)
        elapsed = time.perf_counter() - started
        # counted once per request: a rule costs microseconds, a labelled inc() one more
        hits = sum(1 for _, hit, _ in checked if hit)
        metrics.CACHE_HITS.labels(self.name).inc(hits)
        metrics.CACHE_MISSES.labels(self.name).inc(len(items) - hits)
        for status, count in Counter(result.status for result in results).items():
            metrics.ITEMS.labels(self.name, status).inc(count)
        latency = metrics.ITEM_LATENCY.labels(self.name)
        for _ in results:
            latency.observe(elapsed)
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
        """Every result, the pending regexes searched (each distinct search once)."""
        searches: dict[Hashable, patterns.Search] = {}
        for _, _, state in checked:
            if not isinstance(state, FormatResult):
                for (_, search), search_key in zip(state[1], state[2], strict=True):
                    searches.setdefault(search_key, search)
        outcomes = dict(zip(searches, await self._search(list(searches.items())), strict=True))
        results = []
        for item, (key, _, state) in zip(items, checked, strict=True):
            if isinstance(state, FormatResult):
                results.append(state)
                continue
            verdicts, pending, search_keys = state
            for (k, search), search_key in zip(pending, search_keys, strict=True):
                verdicts[k] = _rule_verdict(item.rules[k].name, search, outcomes[search_key])
            result = combine(item, verdicts)  # type: ignore[arg-type]
            self._put(key, result)
            results.append(result)
        return results

    async def _search(self, searches: list[tuple[Hashable, patterns.Search]]
                      ) -> list[Searched]:
        """Each (key, search)'s outcome, in order."""
        size = self.config.chunk_items  # type: ignore[union-attr]
        chunks = [searches[i:i + size] for i in range(0, len(searches), size)]
        done = await asyncio.gather(*(self._chunk(chunk) for chunk in chunks))
        return [one for chunk in done for one in chunk]

    async def _chunk(self, chunk: list[tuple[Hashable, patterns.Search]]) -> list[Searched]:
        keys = tuple(key for key, _ in chunk)
        searches = [search for _, search in chunk]
        outcome = await self._lane.run(
            keys if len(keys) > 1 else keys[0],
            lambda turn: self._in_worker(searches, turn),
            not_run=lambda reason: [Searched(NOT_RUN, None, reason)] * len(searches))
        if outcome is not None:
            return outcome
        # which search it was: each alone, under its own limit
        return [one for alone in await asyncio.gather(*(self._chunk([one]) for one in chunk))
                for one in alone]

    async def _in_worker(self, searches: list[patterns.Search], turn: Turn) -> Done[Chunk]:
        assert self._pool is not None, "FormatVerifier.start() was not awaited"
        async with turn.slot() as held:
            task = await self._pool.run(patterns.search_many, searches,
                                        timeout=self.config.timeout_s)  # type: ignore[union-attr]
            held.cost_s = task.cost_s
        if task.outcome == "ok":
            return Done([Searched("ok", found) for found in task.value])
        if task.outcome == "unavailable":  # the pool's loss: no search's doing
            return Done([Searched("unavailable", None, task.detail)] * len(searches))
        if len(searches) > 1:
            return Done(None)
        metrics.TIMEOUTS.labels(self.name).inc()
        detail = f"the regex ran out of time ({task.outcome}): {task.detail}"
        return Done([Searched("timeout", None, detail)],
                    timeout=task.cpu_bound if task.outcome == "timeout" else True)


def _slices(items: Sequence[FormatItem]) -> list[Sequence[FormatItem]]:
    """``items`` in runs of about ``SLICE_CHARS`` of text (at least one item each)."""
    out, start, chars = [], 0, 0
    for k, item in enumerate(items):
        chars += len(item.text)
        if chars >= SLICE_CHARS:
            out.append(items[start:k + 1])
            start, chars = k + 1, 0
    return out + [items[start:]] if start < len(items) else out


def _search_key(search: patterns.Search) -> Hashable:
    pattern, flags, text = search
    return pattern, flags, _digest(text)


def _rule_verdict(name: str, search: patterns.Search, searched: Searched) -> RuleVerdict:
    if searched.status == "ok":
        return regex_verdict(name, search, searched.found)
    score = 0.0 if searched.status == "timeout" else None
    return RuleVerdict(rule=name, score=score, passed=None if score is None else False,
                       status=searched.status, reason=searched.detail)  # type: ignore[arg-type]


_LANE_VERDICTS: LaneVerdicts[Chunk] = LaneVerdicts(
    cacheable=lambda chunk: False,  # the verifier caches results itself
    remembered=lambda chunk, age_s: None if chunk is None else [s._replace(detail=(
        f"{s.detail} (the same search, {age_s:.0f} s ago; remembered, not run again)"))
        for s in chunk],
)
