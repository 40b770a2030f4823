"""The slow lane: how a verifier runs the items that need a worker (a math process, a sandbox
container), written once for every verifier that has workers.

An item's way through it, in order:

1. the result cache (``cache.ResultCache``): an answer computed before, or a copy's that is
   running now (see ``SlowLane``);
2. the memory of timeouts (``cache.TimeoutMemory``): a copy of an item that ran out of time
   a moment ago, for the same caller, is answered at once, without a worker (a timeout may
   be the load's, which another caller can make: never handed to someone else);
3. the fair gate (``fair_queue.FairGate``): whose item takes the next free worker. Work may
   take several turns (``Turn.slot`` once per turn), so a long item lets others in between;
4. the work itself, whose result says whether it was a timeout, and whether the machine's
   load could have caused it (``Done``).

An item its request's budget left waiting at the gate never ran: the lane answers it with the
verifier's *not run* verdict (null, status ``not_run``), never a 0 it did not earn.

A verifier whose workers take items in chunks (reasoning_gym hands a container many answers
at once) goes through ``run_batch``: the same cache and memory of timeouts in front, its own
chunking and turns at the gate behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from reward_server import metrics
from reward_server.cache import ResultCache, TimeoutMemory
from reward_server.fair_queue import BudgetSpent, FairGate, Held, current_request
from reward_server.statuses import NOT_RUN  # the status of an item the budget left unrun

V = TypeVar("V")
__all__ = ["NOT_RUN", "Done", "LaneVerdicts", "SlowLane", "Turn"]


@dataclass(frozen=True)
class Done(Generic[V]):
    """The work's result. ``timeout``: None if it was no timeout (nor out of memory); True
    if the machine's load cannot have caused it (believed at once); False if it may have
    (believed when the same item times out again). ``cacheable`` False: the machine or the
    moment decided it, whatever the value says (never cached; remembered per caller at most,
    as a timeout)."""

    value: V
    timeout: bool | None = None
    cacheable: bool = True


@dataclass(frozen=True)
class LaneVerdicts(Generic[V]):
    """What the lane needs of one verifier's results."""

    cacheable: Callable[[V], bool]  # what the candidate decided; not the machine or the moment
    remembered: Callable[[V, float], V]  # a timed-out item's copy, answered from memory (age s)


@dataclass(frozen=True)
class _Running:
    """A computation of an item under way: whose it is, and its Done once it ends."""

    caller: Hashable
    done: asyncio.Future  # of Done[V]


class _Answered(Exception):
    """Decided when this item got its first turn: a copy timed out meanwhile (``value``), a
    copy's result was cached meanwhile (``value``), or a copy of the same caller's is
    running now (``follow``)."""

    def __init__(self, value: object = None, follow: _Running | None = None) -> None:
        self.value, self.follow = value, follow


class Turn:
    """The work's way to the gate: each ``slot()`` is one turn on a worker."""

    def __init__(self, lane: SlowLane, key: Hashable) -> None:  # type: ignore[type-arg]
        self._lane, self._key = lane, key
        self.turns = 0
        self.running: _Running | None = None  # copies follow it once it runs

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Held]:
        # only the first turn waits under the request's budget: a later one belongs to an
        # item that ran, whose own budget bounds it (a cut would make its tests null)
        async with self._lane.gate.slot(budgeted=self.turns == 0) as held:
            if self.turns == 0:
                self._lane.first_turn(self, held)
            self.turns += 1
            yield held


class SlowLane(Generic[V]):
    """Copies of an item (same key) in flight at once run once where that costs no caller its
    place: a copy follows a computation only once it is running (one still waiting at the
    gate waits in its own caller's place, so a copy never inherits another caller's place in
    the queue: an honest item behind a hostile batch that holds the same answer). A copy
    follows its own caller's computation to its end; another caller's only until its own
    turn at the gate comes, when it runs its own (that computation may be slow in turns that
    wait behind its caller's backlog, or be dropped when its client hangs up), and it takes
    from another caller only what the cache would hand it: no timeout, nothing momentary."""

    def __init__(self, name: str, slots: int | FairGate, cache_size: int,
                 remember_timeouts_s: float, verdicts: LaneVerdicts[V],
                 cache_bytes: tuple[int, Callable[[V], int]] | None = None) -> None:
        """``slots``: how many items run at once, at a gate of the lane's own; or the gate
        of a resource the lane shares (the sandbox service's). ``cache_bytes``: the cache's
        byte budget and how to size a value, where a value may be large."""
        self.name = name  # the metrics' verifier label
        self.gate = slots if isinstance(slots, FairGate) else FairGate(slots, name)
        self.verdicts = verdicts
        max_bytes, sizeof = cache_bytes if cache_bytes is not None else (None, None)
        self._cache: ResultCache[V] = ResultCache(cache_size, max_bytes, sizeof)
        self._running: dict[Hashable, _Running] = {}
        self._timeouts: TimeoutMemory[V] = TimeoutMemory(remember_timeouts_s)

    async def run(self, key: Hashable, work: Callable[[Turn], Awaitable[Done[V]]],
                  not_run: Callable[[str], V]) -> V:
        """The item's result: cached, remembered, or ``work``'s when the gate lets it run;
        ``not_run(reason)`` (null, status ``NOT_RUN``) if its request's budget left it
        waiting. ``key`` holds everything the result depends on."""
        value, hit = self._cache.peek(key)
        if not hit:
            try:
                value, hit = await self._compute(key, work)
            except BudgetSpent as exc:
                return not_run(str(exc))
        (metrics.CACHE_HITS if hit else metrics.CACHE_MISSES).labels(self.name).inc()
        return value  # type: ignore[return-value]

    async def run_batch(self, keys: Sequence[Hashable],
                        work: Callable[[list[Hashable]], Awaitable[list[Done[V]]]]) -> list[V]:
        """The results of items whose work is done together: each key's cached or
        remembered result where there is one, and ``work`` on the rest at once (each distinct
        key once, in order; it takes its own turns at the gate and answers what its
        request's budget left waiting as not run), whose results are then kept as ``run``
        keeps them."""
        out: list[V | None] = [None] * len(keys)
        todo: dict[Hashable, list[int]] = {}
        for index, key in enumerate(keys):
            value, hit = self._cache.peek(key)
            if not hit and key not in todo and (found := self.remembered(key)) is not None:
                value, hit = found, True
            if hit:
                out[index] = value
            else:
                todo.setdefault(key, []).append(index)
        metrics.CACHE_HITS.labels(self.name).inc(len(keys) - sum(map(len, todo.values())))
        metrics.CACHE_MISSES.labels(self.name).inc(len(todo))
        if todo:
            for (key, indices), done in zip(todo.items(), await work(list(todo)), strict=True):
                self._keep(key, done)
                for index in indices:
                    out[index] = done.value
        return out  # type: ignore[return-value]

    def _keep(self, key: Hashable, done: Done[V]) -> None:
        """A computed result: a timeout remembered for its caller, a verdict cached."""
        if done.timeout is not None:
            self._timeouts.put(_callers(key), done.value, certain=done.timeout)
        if done.cacheable and self.verdicts.cacheable(done.value):
            self._cache.put(key, done.value)

    def remembered(self, key: Hashable) -> V | None:
        found = self._timeouts.get(_callers(key))
        if found is None:
            return None
        metrics.TIMEOUTS_REMEMBERED.labels(self.name).inc()
        return self.verdicts.remembered(*found)

    def first_turn(self, turn: Turn, held: Held) -> None:
        """At an item's first turn: answered by a copy meanwhile, or it runs, and copies
        that come now follow it."""
        if (found := self.remembered(turn._key)) is not None:
            held.cost_s = 0.0
            raise _Answered(found)
        value, hit = self._cache.peek(turn._key)
        if hit:
            held.cost_s = 0.0
            raise _Answered(value)
        running = self._running.get(turn._key)
        if running is not None and running.caller == _caller():
            held.cost_s = 0.0
            raise _Answered(follow=running)
        if running is None and self._cache.enabled:
            done = asyncio.get_running_loop().create_future()
            turn.running = self._running[turn._key] = _Running(_caller(), done)

    async def _follow(self, running: _Running) -> tuple[V | None, bool]:
        """``running``'s value, if it ends in one this caller may take."""
        try:
            done = await asyncio.shield(running.done)
        except Exception:  # noqa: BLE001 - the copy running it failed: compute our own
            return None, False
        if running.caller == _caller() or (done.cacheable and self.verdicts.cacheable(done.value)):
            return done.value, True
        return None, False

    async def _compute(self, key: Hashable, work: Callable[[Turn], Awaitable[Done[V]]]
                       ) -> tuple[V, bool]:
        if (found := self.remembered(key)) is not None:
            return found, True
        running = self._running.get(key)
        if running is not None and running.caller == _caller():
            value, hit = await self._follow(running)
            if hit:
                return value, True  # type: ignore[return-value]
            running = None
        if running is None:
            return await self._own(key, work)
        # another caller's computation: followed until this copy's own turn comes
        own = asyncio.ensure_future(self._own(key, work))
        followed = asyncio.ensure_future(self._follow(running))
        try:
            await asyncio.wait((own, followed), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            _discard(own, followed)
            raise
        if followed.done() and followed.result()[1]:
            _discard(own)
            return followed.result()  # type: ignore[return-value]
        _discard(followed)
        return await own

    async def _own(self, key: Hashable, work: Callable[[Turn], Awaitable[Done[V]]]
                   ) -> tuple[V, bool]:
        turn = Turn(self, key)
        try:
            done = await work(turn)
        except _Answered as answered:
            if answered.follow is None:
                return answered.value, True  # type: ignore[return-value]
            value, hit = await self._follow(answered.follow)
            return (value, hit) if hit else await self._compute(key, work)  # type: ignore[return-value]
        except BaseException as exc:
            self._settle(turn, exc=exc)
            raise
        self._keep(key, done)
        self._settle(turn, done=done)
        return done.value, False

    def _settle(self, turn: Turn, done: Done[V] | None = None,
                exc: BaseException | None = None) -> None:
        running = turn.running
        if running is None:
            return
        if self._running.get(turn._key) is running:
            del self._running[turn._key]
        if exc is not None:
            running.done.set_exception(
                exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            running.done.exception()  # retrieved: followers compute for themselves
        else:
            running.done.set_result(done)


def _discard(*tasks: asyncio.Future) -> None:
    """Cancel what is no longer wanted; its end (a cancellation, an error) retrieved."""
    for task in tasks:
        task.cancel()
        task.add_done_callback(lambda t: t.cancelled() or t.exception())


def _caller() -> Hashable:
    scope = current_request()
    return None if scope is None else scope.caller


def _callers(key: Hashable) -> Hashable:
    """``key`` as the current request's caller remembers it."""
    return (_caller(), key)
