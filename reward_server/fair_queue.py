"""Fair scheduling of slow work between the callers and requests in flight.

A reward server is shared: several trainers, evaluation jobs and replicas send batches at
once. Its slow resources, the math worker processes and the sandbox containers, each sit
behind a ``FairGate`` that lets ``slots`` items run at a time. Served first come, first
served, one batch of slow items would hold every later request behind all of it.

Policy: an equal share of worker *time*, as Linux's CFS shares a CPU between tasks
(vruntime), at two levels, as cgroups nest: first between **callers** (a token's name, or
the client's address's quota: ``callers``), then between the **requests** of one caller. Each share
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

Within a caller the same holds one level down, so a caller's **one-item requests together
are one share**, served in the order they came: a rollout fleet sends one request per
rollout or per turn, and were each its own share, a backlog of them (slow items arriving
faster than they finish) would each be served before the caller's batch got its second item,
and the batch would wait for the whole backlog. As one share they pay for their own items,
and the batch gets its turn within about one item's time limit per busy slot, whatever the
backlog's size. Each request of several items is a share of its own.

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

Each grant or release costs O(log n) in the shares in flight (``fair_shares``), so 10,000
requests waiting cost no more per event than 10.

The request is found through a context variable that ``request_scope`` sets (the scoring
layer opens one per HTTP request; asyncio tasks inherit it). Work outside any scope shares
one anonymous request with no budget.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import weakref
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from cachetools import TTLCache

from reward_server import metrics
from reward_server.callers import quota_key
from reward_server.errors import ServerStopping
from reward_server.fair_shares import Caller, Order, Request, Waiter

IDLE_MEMORY_S = 60.0  # how long an idle caller's share is remembered
IDLE_CALLERS = 10_000  # at most this many remembered (least recently idle go first)
SINGLES = "one-item requests"  # the key of a caller's one-item requests' common share


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one per request
class RequestScope:
    id: int
    budget_s: float | None
    deadline: float | None  # time.monotonic(); None: no budget
    caller: Hashable = None  # who sent it (routes.caller_of); None: one anonymous caller
    items: int | None = None  # how many items it holds, when known (1: shares as a single)
    # per gate: the caller's busy seconds there when this request first came, so its clock
    # skips the caller's own work from the request's start, whichever item is waiting
    busy_at_arrival: dict[FairGate, float] = field(default_factory=dict, repr=False)

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def share_key(self) -> Hashable:
        """Its share among its caller's requests: its own, or its caller's singles'."""
        return SINGLES if self.items == 1 else self


class BudgetSpent(Exception):
    """The request's budget ran out before this item got a slot; it did not run."""


_current: ContextVar[RequestScope | None] = ContextVar("reward_request", default=None)
_ids = itertools.count(1)


@contextmanager
def request_scope(budget_s: float | None, caller: Hashable = None, items: int | None = None
                  ) -> Iterator[RequestScope]:
    """Everything scored inside (and in tasks started inside) is one request to the gates.
    ``budget_s`` None or 0: no budget. ``items``: how many items the request holds."""
    budget = budget_s or None
    scope = RequestScope(next(_ids), budget,
                         None if budget is None else time.monotonic() + budget, caller, items)
    token = _current.set(scope)
    try:
        with metrics.REQUESTS_IN_FLIGHT.track_inprogress():
            yield scope
    finally:
        _current.reset(token)


_GATES: weakref.WeakSet[FairGate] = weakref.WeakSet()


def stop_admission() -> None:
    """The server is stopping (``drain``): every gate answers the items waiting at it, and
    any that comes later, ServerStopping (503: another replica runs them at once); the items
    running go on, for the drain's deadline."""
    for gate in list(_GATES):
        gate.close()


def current_request() -> RequestScope | None:
    return _current.get()


@dataclass
class Held:
    """A held slot. ``cost_s``: the work the item measured; None charges the time held."""

    cost_s: float | None = None


class FairGate:
    """``slots`` items at a time, shared between callers and requests (see the module
    docstring).

        async with gate.slot():
            await run_the_slow_part()
    """

    def __init__(self, slots: int, name: str,
                 upkeep: Callable[[], AbstractAsyncContextManager[object]] | None = None
                 ) -> None:
        """``upkeep``: entered inside each held slot, around its body: what the holder's
        work leaves to be done on the resource (the sandbox's: a container its program
        spoiled, replaced) is done there, after the body and before the slot is free, so
        its time is the holder's, charged to its share as the rest of its turn."""
        if slots < 1:
            raise ValueError(f"a gate needs at least one slot, got {slots}")
        self.slots = slots
        self.name = name
        self._upkeep = upkeep
        self._callers: dict[Hashable, Caller] = {}
        self._order = Order()  # of the callers
        # a caller that went idle: its level, busy seconds and request floor, for a while,
        # so a trainer that posts batch after batch keeps what it was served (else each
        # batch would join level with the least served, and the gate share items, not time)
        self._idle: TTLCache[Hashable, tuple[float, float, float]] = TTLCache(
            IDLE_CALLERS, ttl=IDLE_MEMORY_S)
        self._grants = itertools.count(1)
        self._floor = 0.0  # the least-served caller's level, kept when none is in flight
        self._running = self._waiting = self._requests = 0
        self.closed = False  # stopping: no item starts here any more (``stop_admission``)
        _GATES.add(self)

    def resize(self, slots: int) -> None:
        """``slots`` from now on (at least one): more let the longest waiters in at once;
        fewer let no one in until enough holders are done (none is cut short)."""
        self.slots = max(1, slots)
        self._dispatch()

    def close(self) -> None:
        """No item starts here any more: those waiting, and any that comes, get
        ServerStopping; those running go on."""
        self.closed = True
        now = time.monotonic()
        for caller in list(self._callers.values()):
            for request in list(caller.requests.values()):
                for waiter in request.queue:
                    if not waiter.future.done():  # its _acquire finds its shares settled
                        waiter.future.set_exception(ServerStopping())
                self._waiting -= request.waiting
                caller.waiting -= request.waiting
                request.waiting = 0
                request.queue.clear()
                self._settle(caller, request, now)
            caller.queue.clear()
        self._publish()

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def requests(self) -> int:
        """Request shares with items waiting or running here (a caller's one-item requests
        count as one)."""
        return self._requests

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
            if self._upkeep is None:
                yield held
            else:
                async with self._upkeep():
                    yield held
        finally:
            self._release(caller, request, grant, held.cost_s)

    def holding(self, caller: Hashable) -> int:
        """How many slots ``caller`` (its quota's share) holds now."""
        share = self._callers.get(quota_key(caller))
        return 0 if share is None else share.running

    def _join(self, scope: RequestScope | None, waiter: Waiter, now: float
              ) -> tuple[Caller, Request]:
        """The caller's and the request's shares, joined if new, with ``waiter`` queued."""
        # shared by quota, not address: one process can use every loopback address and a
        # host every address of its /64, and would take a share for each
        key = None if scope is None else quota_key(scope.caller)
        caller = self._callers.get(key)
        new_caller = caller is None
        if caller is None:
            self._floor = self._order.least(now, self._floor)
            level, busy_s, floor = self._idle.pop(key, (self._floor, 0.0, 0.0))
            caller = self._callers[key] = Caller(max(level, self._floor), key=key,
                                                 busy_s=busy_s, floor=floor)
        share_key = None if scope is None else scope.share_key()
        request = caller.requests.get(share_key)
        new_request = request is None
        if request is None:
            caller.floor = caller.order.least(now, caller.floor)
            request = caller.requests[share_key] = Request(caller.floor, key=share_key)
            self._requests += 1
        for share in (request, caller):
            share.queue.append(waiter)
            share.waiting += 1
        self._waiting += 1
        # a share already in flight keeps its place: a new item is never its oldest
        if new_request:
            caller.order.add(request)
        if new_caller:
            self._order.add(caller)
        return caller, request

    async def _acquire(self, budgeted: bool) -> tuple[Caller, Request, int]:
        if self.closed:
            raise ServerStopping()
        scope = current_request()
        now = time.monotonic()
        waiter = Waiter(asyncio.get_running_loop().create_future(), now)
        caller, request = self._join(scope, waiter, now)
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
            outcome = (None if not waiter.future.done() or waiter.future.cancelled()
                       else waiter.future.exception() or "granted")
            if outcome == "granted":  # granted as we gave up
                self._release(caller, request, waiter.future.result())
            elif isinstance(outcome, ServerStopping):
                pass  # ``close`` took it out of its shares
            else:
                waiter.future.cancel()  # left in the queues, dropped when it reaches a head
                for share in (request, caller):
                    share.waiting -= 1
                self._waiting -= 1
                self._settle(caller, request, time.monotonic())
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
            caller = self._order.best(now)
            assert isinstance(caller, Caller)
            request = caller.order.best(now)
            assert isinstance(request, Request)
            waiter = request.pop_head()
            grant = next(self._grants)
            request.starts[grant] = now
            for share, order in ((request, caller.order), (caller, self._order)):
                share.waiting -= 1
                share.running += 1
                share.started_sum += now
                if share.running == 1:
                    order.started(share)
            if caller.busy_since is None:
                caller.busy_since = now
            self._waiting -= 1
            self._running += 1
            metrics.QUEUE_WAIT.labels(self.name).observe(now - waiter.queued_at)
            if (label := metrics.caller_label(caller.key)) is not None:
                metrics.CALLER_QUEUE_WAIT.labels(label).observe(now - waiter.queued_at)
            waiter.future.set_result(grant)
        self._publish()

    def _release(self, caller: Caller, request: Request, grant: int,
                 cost_s: float | None = None) -> None:
        now = time.monotonic()
        started = request.starts.pop(grant)
        cost = now - started if cost_s is None else cost_s
        for share in (request, caller):
            share.running -= 1
            share.started_sum -= started
            share.served_s += cost
        self._running -= 1
        if caller.running == 0 and caller.busy_since is not None:
            caller.busy_s += now - caller.busy_since
            caller.busy_since = None
        self._settle(caller, request, now)
        self._dispatch()

    def _settle(self, caller: Caller, request: Request, now: float) -> None:
        """After an item of ``request`` stopped running or waiting: each share back in its
        order by its new level and head, or gone when nothing of it is left."""
        floor = caller.order.settle(request, caller.floor, now)
        if floor is not None:
            caller.floor = floor
            del caller.requests[request.key]
            self._requests -= 1
        floor = self._order.settle(caller, self._floor, now)
        if floor is not None:
            self._floor = floor
            del self._callers[caller.key]
            self._idle[caller.key] = (caller.served(now), caller.busy(now), caller.floor)

    def _publish(self) -> None:
        metrics.QUEUE_WAITING.labels(self.name).set(self.waiting)
        metrics.QUEUE_REQUESTS.labels(self.name).set(self.requests)
