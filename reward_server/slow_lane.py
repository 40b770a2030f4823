"""The slow lane: how a verifier runs the items that need a worker (a math process, a sandbox
container), written once for every verifier that has workers.

An item's way through it, in order:

1. the result cache (``cache.ResultCache``): an answer computed before, or in flight now;
2. the memory of timeouts (``cache.TimeoutMemory``): a copy of an item that ran out of time
   a moment ago is answered at once, without a worker;
3. the fair gate (``fair_queue.FairGate``): whose item takes the next free worker. Work may
   take several turns (``Turn.slot`` once per turn), so a long item lets others in between;
4. the work itself, whose result says whether it was a timeout, and whether the machine's
   load could have caused it (``Done``).

An item its request's budget left waiting at the gate never ran: the lane answers it with the
verifier's *not run* verdict (null, status ``not_run``), never a 0 it did not earn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from reward_server import metrics
from reward_server.cache import ResultCache, TimeoutMemory
from reward_server.fair_queue import BudgetSpent, FairGate, Held
from sandbox.harness.statuses import NOT_RUN  # the status of an item the budget left unrun

V = TypeVar("V")
__all__ = ["NOT_RUN", "Done", "LaneVerdicts", "SlowLane", "Turn"]


@dataclass(frozen=True)
class Done(Generic[V]):
    """The work's result. ``timeout``: None if it was no timeout (nor out of memory); True
    if the machine's load cannot have caused it (believed at once); False if it may have
    (believed when the same item times out again)."""

    value: V
    timeout: bool | None = None


@dataclass(frozen=True)
class LaneVerdicts(Generic[V]):
    """What the lane needs of one verifier's results."""

    cacheable: Callable[[V], bool]  # what the candidate decided; not the machine or the moment
    remembered: Callable[[V, float], V]  # a timed-out item's copy, answered from memory (age s)


class _FromMemory(Exception):
    """A copy timed out while this item waited for its turn: answered without running."""

    def __init__(self, value: object) -> None:
        self.value = value


class Turn:
    """The work's way to the gate: each ``slot()`` is one turn on a worker."""

    def __init__(self, lane: SlowLane, key: Hashable) -> None:  # type: ignore[type-arg]
        self._lane, self._key = lane, key
        self.turns = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Held]:
        # only the first turn waits under the request's budget: a later one belongs to an
        # item that ran, whose own budget bounds it (a cut would make its tests null)
        async with self._lane.gate.slot(budgeted=self.turns == 0) as held:
            if self.turns == 0 and (found := self._lane.remembered(self._key)) is not None:
                held.cost_s = 0.0
                raise _FromMemory(found)
            self.turns += 1
            yield held


class SlowLane(Generic[V]):
    def __init__(self, name: str, slots: int, cache_size: int, remember_timeouts_s: float,
                 verdicts: LaneVerdicts[V]) -> None:
        self.name = name  # the metrics' verifier label
        self.gate = FairGate(slots, name)
        self.verdicts = verdicts
        self._cache: ResultCache[V] = ResultCache(cache_size)
        self._timeouts: TimeoutMemory[V] = TimeoutMemory(remember_timeouts_s)

    async def run(self, key: Hashable, work: Callable[[Turn], Awaitable[Done[V]]],
                  not_run: Callable[[str], V]) -> V:
        """The item's result: cached, remembered, or ``work``'s when the gate lets it run;
        ``not_run(reason)`` (null, status ``NOT_RUN``) if its request's budget left it
        waiting. ``key`` holds everything the result depends on."""
        try:
            value, hit = await self._cache.get_or_compute(
                key, lambda: self._compute(key, work), cacheable=self.verdicts.cacheable)
        except BudgetSpent as exc:
            return not_run(str(exc))
        (metrics.CACHE_HITS if hit else metrics.CACHE_MISSES).labels(self.name).inc()
        return value

    def remembered(self, key: Hashable) -> V | None:
        found = self._timeouts.get(key)
        if found is None:
            return None
        metrics.TIMEOUTS_REMEMBERED.labels(self.name).inc()
        return self.verdicts.remembered(*found)

    async def _compute(self, key: Hashable, work: Callable[[Turn], Awaitable[Done[V]]]) -> V:
        if (found := self.remembered(key)) is not None:
            return found
        try:
            done = await work(Turn(self, key))
        except _FromMemory as exc:
            return exc.value  # type: ignore[return-value]
        if done.timeout is not None:
            self._timeouts.put(key, done.value, certain=done.timeout)
        return done.value
