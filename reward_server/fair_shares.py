"""The shares a fair gate orders (``fair_queue``), kept so that each event costs O(log n).

A share is a caller among the callers at a gate, or a request among its caller's requests.
Its level is the seconds of work its items cost (``served``); the gate gives a free slot to
the least-served share that has an item waiting, ties to the one whose next item has waited
longest. A share with an item running is served more each instant, so it cannot keep a place
in a heap; but there are at most as many of those as the gate has slots, so they are kept in
a set and compared each time. The others are not served while they wait, so their level
stands still and a heap keeps them in order. Entries that went stale (the share started an
item, left, or its oldest waiter gave up) are skipped when they reach the top, and the heap
is rebuilt when they outnumber the live ones. Waiters given up or granted are likewise
dropped from a queue's head when they reach it, each once.

So with 10,000 requests in flight a grant or a release costs what it costs with 10: a few
heap steps and a look at the shares now running, never a walk over everyone waiting.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass(eq=False)
class Waiter:
    """One item waiting for a slot; its future gets the grant."""

    future: asyncio.Future[int]
    queued_at: float


def live_head(queue: deque[Waiter]) -> Waiter:
    """The oldest waiter still waiting (one is known to be there); those granted or given up
    ahead of it are dropped on the way."""
    while queue[0].future.done():
        queue.popleft()
    return queue[0]


@dataclass(eq=False)  # compared and hashed by identity
class Share:
    served_s: float = 0.0  # seconds of finished items, from the level it joined at
    running: int = 0
    started_sum: float = 0.0  # of the running items' starts: served() in O(1)
    waiting: int = 0
    version: int = 0  # bumped whenever its heap entry goes stale
    queue: deque[Waiter] = field(default_factory=deque)  # its waiters, oldest first

    def served(self, now: float) -> float:
        """Finished work plus the running items' time so far."""
        return self.served_s + self.running * now - self.started_sum

    def head_since(self) -> float:
        return live_head(self.queue).queued_at


@dataclass(eq=False)
class Request(Share):
    """One request's place at one gate (or its caller's one-item requests together)."""

    key: Hashable = None
    starts: dict[int, float] = field(default_factory=dict)  # grant -> monotonic start

    def pop_head(self) -> Waiter:
        live_head(self.queue)
        return self.queue.popleft()


@dataclass(eq=False)
class Caller(Share):
    """One caller's place at one gate: its requests, and the time it had a slot. Its queue
    holds every item of every request of it, so its head is its oldest waiting item."""

    key: Hashable = None
    requests: dict[Hashable, Request] = field(default_factory=dict)
    order: Order = field(default_factory=lambda: Order())
    floor: float = 0.0  # its least-served request's level, for requests that join
    busy_s: float = 0.0  # seconds with at least one item running, up to busy_since
    busy_since: float | None = None

    def busy(self, now: float) -> float:
        return self.busy_s + (0.0 if self.busy_since is None else now - self.busy_since)


class Order:
    """The shares in flight at one level, least served first (see the module docstring)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, float, int, int, Share]] = []
        self._running: set[Share] = set()
        self._seq = itertools.count()
        self.count = 0  # shares in flight

    def add(self, share: Share) -> None:
        """A share that joined with an item waiting."""
        self.count += 1
        self.queued(share)

    def started(self, share: Share) -> None:
        """Its first running item started: its level moves with the clock from now."""
        share.version += 1
        self._running.add(share)

    def queued(self, share: Share) -> None:
        """Nothing of it runs and something waits (after a release, a join or a waiter that
        gave up): its place by its level and its head."""
        self._running.discard(share)
        share.version += 1
        heapq.heappush(self._heap, (share.served_s, share.head_since(), next(self._seq),
                                    share.version, share))
        if len(self._heap) > 2 * self.count + 64:
            self._heap = [e for e in self._heap if e[3] == e[4].version]
            heapq.heapify(self._heap)

    def remove(self, share: Share) -> None:
        """Nothing of it waits or runs."""
        self.count -= 1
        share.version += 1
        self._running.discard(share)

    def settle(self, share: Share, floor: float, now: float) -> float | None:
        """After an item of ``share`` stopped running or waiting: back in order by its new
        level and head, or, with nothing of it left, out; then the floor for shares that
        join next (None: it stays)."""
        if share.running:
            return None
        if share.waiting:
            self.queued(share)
            return None
        floor = self.least(now, floor)
        self.remove(share)
        return floor

    def best(self, now: float) -> Share:
        """The share whose item goes next (one has an item waiting)."""
        candidates = [s for s in self._running if s.waiting]
        top = self._top()
        if top is not None:
            candidates.append(top)
        return min(candidates, key=lambda s: (s.served(now), s.head_since()))

    def least(self, now: float, floor: float) -> float:
        """Where a share that joins starts: level with the least served in flight, never
        below ``floor`` (kept while none is in flight, so one that leaves and comes back
        banks nothing)."""
        levels = [s.served(now) for s in self._running]
        top = self._top()
        if top is not None:
            levels.append(top.served_s)
        return max(floor, min(levels, default=floor))

    def _top(self) -> Share | None:
        heap = self._heap
        while heap:
            entry = heap[0]
            if entry[3] == entry[4].version:
                return entry[4]
            heapq.heappop(heap)
        return None
