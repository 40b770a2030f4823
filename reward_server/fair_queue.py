"""Fair scheduling of slow work between the requests in flight (issue 13).

A reward server is shared: several trainers, evaluation jobs and replicas send batches at
once. Its slow resources, the math worker processes and the sandbox containers, each sit
behind a ``FairGate`` that lets ``slots`` items run at a time. Served first come, first
served, one batch of slow items would hold every later request behind all of it.

Policy: an equal share of worker *time* per request, as Linux's CFS shares a CPU between
tasks (vruntime). Each request at a gate accumulates the seconds of work its items cost: what
the holder measured (a math task's run time inside its worker), else the time the slot was
held; items still running count up to now. A free slot goes to the waiting request with
the least; ties go to the one served longest ago (round-robin). A request that arrives
starts level with the least-served request in flight, not at zero: a stream of short
requests cannot starve a long one, and a long one banks no credit while it waits. (Measured
cost matters: an honest item that waited for a worker killed by someone else's timeout to
be replaced would otherwise be charged for the replacement's start.)

Why time and not items: round-robin by items gives a batch of 3-second items 3 s of a
worker per turn and an honest batch 10 ms, so with two workers the slow batch soon holds
both. Sharing time, an arriving request is the least served, so its first item takes the
next slot that frees: it waits for at most about one item's time limit, whatever is queued.

A request's budget: items still waiting when its deadline passes raise ``BudgetSpent`` at
once, so a hostile batch ends at its budget instead of holding its client (and its share
of the workers) for hours. Items already running finish under their own time limit.

The request is found through a context variable that ``request_scope`` sets (the scoring
layer opens one per HTTP request; asyncio tasks inherit it). Work outside any scope shares
one anonymous request with no budget.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Hashable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from reward_server import metrics


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one per request
class RequestScope:
    id: int
    budget_s: float | None
    deadline: float | None  # time.monotonic(); None: no budget

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


class BudgetSpent(Exception):
    """The request's budget ran out before this item got a slot; it did not run."""


_current: ContextVar[RequestScope | None] = ContextVar("reward_request", default=None)
_ids = itertools.count(1)


@contextmanager
def request_scope(budget_s: float | None) -> Iterator[RequestScope]:
    """Everything scored inside (and in tasks started inside) is one request to the gates.
    ``budget_s`` None or 0: no budget."""
    budget = budget_s or None
    scope = RequestScope(next(_ids), budget,
                         None if budget is None else time.monotonic() + budget)
    token = _current.set(scope)
    try:
        with metrics.REQUESTS_IN_FLIGHT.track_inprogress():
            yield scope
    finally:
        _current.reset(token)


def current_request() -> RequestScope | None:
    return _current.get()


@dataclass(eq=False)
class _Share:
    """One request's place at one gate."""

    key: Hashable
    served_s: float  # slot-seconds of finished items, from the level it joined at
    waiting: deque[tuple[asyncio.Future[int], float]] = field(default_factory=deque)
    running: dict[int, float] = field(default_factory=dict)  # grant -> monotonic start
    last_grant: int = 0

    def served(self, now: float) -> float:
        return self.served_s + sum(now - start for start in self.running.values())


@dataclass
class Held:
    """A held slot. ``cost_s``: the work the item measured; None charges the time held."""

    cost_s: float | None = None


class FairGate:
    """``slots`` items at a time, shared between requests (see the module docstring).

        async with gate.slot():
            await run_the_slow_part()
    """

    def __init__(self, slots: int, name: str) -> None:
        if slots < 1:
            raise ValueError(f"a gate needs at least one slot, got {slots}")
        self.slots = slots
        self.name = name
        self._shares: dict[Hashable, _Share] = {}
        self._grants = itertools.count(1)
        self._floor = 0.0  # the least-served request's level, kept when none is in flight

    @property
    def running(self) -> int:
        return sum(len(s.running) for s in self._shares.values())

    @property
    def waiting(self) -> int:
        return sum(len(s.waiting) for s in self._shares.values())

    @property
    def requests(self) -> int:
        """Requests with items waiting or running here."""
        return len(self._shares)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Held]:
        """Hold one slot for the body. Raises ``BudgetSpent`` if the current request's
        deadline passes while waiting."""
        share, grant = await self._acquire()
        held = Held()
        try:
            yield held
        finally:
            self._release(share, grant, held.cost_s)

    async def _acquire(self) -> tuple[_Share, int]:
        scope = current_request()
        now = time.monotonic()
        share = self._shares.get(scope)
        if share is None:
            share = self._shares[scope] = _Share(scope, self._level(now))
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        share.waiting.append((future, now))
        self._dispatch()
        if future.done():
            return share, future.result()
        delay = scope.remaining() if scope is not None else None
        try:
            async with asyncio.timeout(None if delay is None else max(delay, 0.0)):
                return share, await future
        except BaseException as exc:
            if future.done() and not future.cancelled():  # granted as we gave up: pass it on
                self._release(share, future.result())
            else:
                future.cancel()
                share.waiting = deque(w for w in share.waiting if w[0] is not future)
                self._forget_if_idle(share)
                self._publish()
            if isinstance(exc, TimeoutError) and scope is not None:
                metrics.BUDGET_CUTS.labels(self.name).inc()
                raise BudgetSpent(
                    f"not run: this request's budget of {scope.budget_s:g} s "
                    "(REWARD_SERVER_REQUEST_BUDGET_S) ran out while the item waited for "
                    f"a {self.name} worker") from None
            raise

    def _level(self, now: float) -> float:
        if self._shares:
            self._floor = max(self._floor, min(s.served(now) for s in self._shares.values()))
        return self._floor

    def _dispatch(self) -> None:
        now = time.monotonic()
        while self.running < self.slots:
            ready = [s for s in self._shares.values() if s.waiting]
            if not ready:
                break
            share = min(ready, key=lambda s: (s.served(now), s.last_grant))
            future, queued_at = share.waiting.popleft()
            if future.done():  # its waiter gave up
                continue
            grant = next(self._grants)
            share.last_grant = grant
            share.running[grant] = now
            metrics.QUEUE_WAIT.labels(self.name).observe(now - queued_at)
            future.set_result(grant)
        self._publish()

    def _release(self, share: _Share, grant: int, cost_s: float | None = None) -> None:
        held_s = time.monotonic() - share.running.pop(grant)
        share.served_s += held_s if cost_s is None else cost_s
        self._forget_if_idle(share)
        self._dispatch()

    def _forget_if_idle(self, share: _Share) -> None:
        if not share.waiting and not share.running:
            self._level(time.monotonic())
            self._shares.pop(share.key, None)

    def _publish(self) -> None:
        metrics.QUEUE_WAITING.labels(self.name).set(self.waiting)
        metrics.QUEUE_REQUESTS.labels(self.name).set(self.requests)
