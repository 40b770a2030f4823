"""Fair scheduling of slow work between the callers and requests in flight.

A reward server is shared: several trainers, evaluation jobs and replicas send batches at
once. Its slow resources, the math worker processes and the sandbox containers, each sit
behind a ``FairGate`` that lets ``slots`` items run at a time. Served first come, first
served, one batch of slow items would hold every later request behind all of it.

Policy: an equal share of worker *time*, as Linux's CFS shares a CPU between tasks
(vruntime), at two levels, as cgroups nest: first between **callers** (a token's name, or
the client's address: ``callers``), then between the **requests** of one caller. Each share
accumulates the seconds of work its items cost: what the holder measured (a math task's run
time inside its worker), else the time the slot was held; items still running count up to
now. A free slot goes to the least-served caller, and within it to its least-served request;
ties go to the one whose next item has waited longest. A share that arrives starts level with
the least-served one in flight, not at zero, so it banks no credit while away.

Why callers first: shares per request alone let a stream of new one-item requests starve a
batch. Each newcomer starts level with the batch (the least served) and wins; the batch, once
served an item, sits above every newcomer that joins after it. Under one caller's share the
stream pays for its own items, and a batch of another caller's gets its turn within about one
item's time limit per busy slot. (Requests of one caller still share fairly between
themselves: a trainer's evaluation job does not wait for its training batch.)

Why time and not items: round-robin by items gives a batch of 3-second items 3 s of a worker
per turn and an honest batch 10 ms, so with two workers the slow batch soon holds both.
Sharing time, an arriving caller is the least served, so its first item takes the next slot
that frees: it waits for at most about one item's time limit, whatever is queued.

A request's budget bounds how long its items are **shut out by other callers**: the clock
runs only while the request's caller has no item running at this gate. An item still
waiting when that time passes the budget raises ``BudgetSpent`` (scored null: it never ran).
Time the caller's own items hold the workers does not count: a batch whose own slow items
(programs that loop, towers of exponents) keep its other items waiting gets every item run,
so slowness cannot buy a null where a fast wrong answer gets 0. A request's answer time is
thus bounded by its budget plus its own work on its share of the workers, each item of which
is bounded by its own time limit. Items already running finish under their own time limit.

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

from cachetools import TTLCache

from reward_server import metrics

IDLE_MEMORY_S = 60.0  # how long an idle caller's share is remembered
IDLE_CALLERS = 10_000  # at most this many remembered (least recently idle go first)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one per request
class RequestScope:
    id: int
    budget_s: float | None
    deadline: float | None  # time.monotonic(); None: no budget
    caller: Hashable = None  # who sent it (routes.caller_of); None: one anonymous caller
    # per gate: the caller's busy seconds there when this request first came, so its clock
    # skips the caller's own work from the request's start, whichever item is waiting
    busy_at_arrival: dict[FairGate, float] = field(default_factory=dict, repr=False)

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


class BudgetSpent(Exception):
    """The request's budget ran out before this item got a slot; it did not run."""


_current: ContextVar[RequestScope | None] = ContextVar("reward_request", default=None)
_ids = itertools.count(1)


@contextmanager
def request_scope(budget_s: float | None, caller: Hashable = None) -> Iterator[RequestScope]:
    """Everything scored inside (and in tasks started inside) is one request to the gates.
    ``budget_s`` None or 0: no budget."""
    budget = budget_s or None
    scope = RequestScope(next(_ids), budget,
                         None if budget is None else time.monotonic() + budget, caller)
    token = _current.set(scope)
    try:
        with metrics.REQUESTS_IN_FLIGHT.track_inprogress():
            yield scope
    finally:
        _current.reset(token)


def current_request() -> RequestScope | None:
    return _current.get()


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[int]
    queued_at: float


@dataclass(eq=False)
class _Request:
    """One request's place at one gate."""

    key: RequestScope | None
    served_s: float  # slot-seconds of finished items, from the level it joined at
    waiting: deque[_Waiter] = field(default_factory=deque)
    running: dict[int, float] = field(default_factory=dict)  # grant -> monotonic start
    started_sum: float = 0.0  # of the running items' starts: served() in O(1)

    def served(self, now: float) -> float:
        return self.served_s + len(self.running) * now - self.started_sum

    def head_since(self) -> float:
        return self.waiting[0].queued_at


@dataclass(eq=False)
class _Caller:
    """One caller's place at one gate: its requests, and the time it had a slot."""

    key: Hashable
    served_s: float
    requests: dict[RequestScope | None, _Request] = field(default_factory=dict)
    floor: float = 0.0  # its least-served request's level, for requests that join
    busy_s: float = 0.0  # seconds with at least one item running, up to busy_since
    busy_since: float | None = None
    running: int = 0
    waiting: int = 0
    started_sum: float = 0.0

    def served(self, now: float) -> float:
        return self.served_s + self.running * now - self.started_sum

    def busy(self, now: float) -> float:
        return self.busy_s + (0.0 if self.busy_since is None else now - self.busy_since)

    def ready(self) -> list[_Request]:
        return [r for r in self.requests.values() if r.waiting]

    def head_since(self) -> float:
        return min(r.head_since() for r in self.ready())


@dataclass
class Held:
    """A held slot. ``cost_s``: the work the item measured; None charges the time held."""

    cost_s: float | None = None


def _level(shares: list[_Caller] | list[_Request], floor: float, now: float) -> float:
    """Where a share that joins starts: level with the least served, never below the floor
    (kept while none is in flight, so a caller that leaves and comes back banks nothing)."""
    return max(floor, min((s.served(now) for s in shares), default=floor))


class FairGate:
    """``slots`` items at a time, shared between callers and requests (see the module
    docstring).

        async with gate.slot():
            await run_the_slow_part()
    """

    def __init__(self, slots: int, name: str) -> None:
        if slots < 1:
            raise ValueError(f"a gate needs at least one slot, got {slots}")
        self.slots = slots
        self.name = name
        self._callers: dict[Hashable, _Caller] = {}
        # a caller that went idle: its level, busy seconds and request floor, for a while,
        # so a trainer that posts batch after batch keeps what it was served (else each
        # batch would join level with the least served, and the gate share items, not time)
        self._idle: TTLCache[Hashable, tuple[float, float, float]] = TTLCache(
            IDLE_CALLERS, ttl=IDLE_MEMORY_S)
        self._grants = itertools.count(1)
        self._floor = 0.0  # the least-served caller's level, kept when none is in flight
        self._running = self._waiting = 0

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def requests(self) -> int:
        """Requests with items waiting or running here."""
        return sum(len(c.requests) for c in self._callers.values())

    @property
    def callers(self) -> int:
        """Callers with items waiting or running here."""
        return len(self._callers)

    @asynccontextmanager
    async def slot(self, budgeted: bool = True) -> AsyncIterator[Held]:
        """Hold one slot for the body. Raises ``BudgetSpent`` if the current request's
        caller is shut out past the request's budget while this item waits. ``budgeted``
        False: a later turn of an item that already ran (its own budget bounds it; a cut
        would throw away tests that ran and make them null)."""
        caller, request, grant = await self._acquire(budgeted)
        held = Held()
        try:
            yield held
        finally:
            self._release(caller, request, grant, held.cost_s)

    def _join(self, scope: RequestScope | None, now: float) -> tuple[_Caller, _Request]:
        key = None if scope is None else scope.caller
        caller = self._callers.get(key)
        if caller is None:
            self._floor = _level(list(self._callers.values()), self._floor, now)
            level, busy_s, floor = self._idle.pop(key, (self._floor, 0.0, 0.0))
            caller = self._callers[key] = _Caller(key, max(level, self._floor), busy_s=busy_s,
                                                  floor=floor)
        request = caller.requests.get(scope)
        if request is None:
            caller.floor = _level(list(caller.requests.values()), caller.floor, now)
            request = caller.requests[scope] = _Request(scope, caller.floor)
        return caller, request

    async def _acquire(self, budgeted: bool) -> tuple[_Caller, _Request, int]:
        scope = current_request()
        now = time.monotonic()
        caller, request = self._join(scope, now)
        waiter = _Waiter(asyncio.get_running_loop().create_future(), now)
        request.waiting.append(waiter)
        caller.waiting += 1
        self._waiting += 1
        busy_at_arrival = (None if scope is None or not budgeted
                           else scope.busy_at_arrival.setdefault(self, caller.busy(now)))
        self._dispatch()
        try:
            while not waiter.future.done():
                # the budget, plus the time the caller has held slots since the request came
                left = scope.remaining() if busy_at_arrival is not None else None
                if left is not None:
                    # (never below 0: a caller forgotten past IDLE_MEMORY_S starts again at 0)
                    left += max(0.0, caller.busy(time.monotonic()) - busy_at_arrival)
                    if left <= 0:
                        raise TimeoutError
                await asyncio.wait({waiter.future}, timeout=left)
            return caller, request, waiter.future.result()
        except BaseException as exc:
            if waiter.future.done() and not waiter.future.cancelled():  # granted as we gave up
                self._release(caller, request, waiter.future.result())
            else:
                waiter.future.cancel()
                request.waiting.remove(waiter)
                caller.waiting -= 1
                self._waiting -= 1
                self._forget_if_idle(caller, request)
                self._publish()
            if isinstance(exc, TimeoutError) and scope is not None:
                metrics.BUDGET_CUTS.labels(self.name).inc()
                raise BudgetSpent(
                    f"not run: this request's budget of {scope.budget_s:g} s "
                    "(REWARD_SERVER_REQUEST_BUDGET_S) ran out while other callers' items "
                    f"held every {self.name} worker") from None
            raise

    def _dispatch(self) -> None:
        now = time.monotonic()
        while self._running < self.slots and self._waiting:
            ready = [c for c in self._callers.values() if c.waiting]
            caller = min(ready, key=lambda c: (c.served(now), c.head_since()))
            request = min(caller.ready(), key=lambda r: (r.served(now), r.head_since()))
            waiter = request.waiting.popleft()
            caller.waiting -= 1
            self._waiting -= 1
            if waiter.future.done():  # its waiter gave up
                continue
            grant = next(self._grants)
            if caller.busy_since is None:
                caller.busy_since = now
            request.running[grant] = now
            request.started_sum += now
            caller.running += 1
            caller.started_sum += now
            self._running += 1
            metrics.QUEUE_WAIT.labels(self.name).observe(now - waiter.queued_at)
            waiter.future.set_result(grant)
        self._publish()

    def _release(self, caller: _Caller, request: _Request, grant: int,
                 cost_s: float | None = None) -> None:
        now = time.monotonic()
        started = request.running.pop(grant)
        request.started_sum -= started
        caller.running -= 1
        caller.started_sum -= started
        self._running -= 1
        cost = now - started if cost_s is None else cost_s
        request.served_s += cost
        caller.served_s += cost
        if caller.running == 0 and caller.busy_since is not None:
            caller.busy_s += now - caller.busy_since
            caller.busy_since = None
        self._forget_if_idle(caller, request)
        self._dispatch()

    def _forget_if_idle(self, caller: _Caller, request: _Request) -> None:
        now = time.monotonic()
        if not request.waiting and not request.running:
            caller.floor = _level(list(caller.requests.values()), caller.floor, now)
            caller.requests.pop(request.key, None)
        if not caller.requests:
            self._floor = _level(list(self._callers.values()), self._floor, now)
            self._callers.pop(caller.key, None)
            self._idle[caller.key] = (caller.served(now), caller.busy(now), caller.floor)

    def _publish(self) -> None:
        metrics.QUEUE_WAITING.labels(self.name).set(self.waiting)
        metrics.QUEUE_REQUESTS.labels(self.name).set(self.requests)
