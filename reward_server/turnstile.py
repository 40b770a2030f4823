"""How many requests start per turn of the event loop, and in which callers' order.

Everything a request costs on the server's own loop (its headers, its body's JSON, item
checks, the answers computed in the process: plain numbers, cache hits) runs in the order
the loop finds it ready. A rollout fleet's burst makes thousands ready at once; asyncio runs
every callback that was ready when a turn began before it looks again, so one turn then
lasts as long as all of them together (4,000 requests: about 3 s here), and whatever arrives
meanwhile waits that long: a probe of ``/healthz`` (which Kubernetes reads as a dead server),
and another caller's one request behind a neighbour's thousands.

So each request first takes its turn at a turnstile (pure ASGI, inside the token check: the
caller is known): at most ``per_turn`` requests start per turn of the loop, the rest wait
parked (costing the loop nothing), and the callers with requests waiting take turns one
request each, round-robin, whatever each has queued. A turn of the loop is then at most
``per_turn`` requests' work plus what is newly arriving, and a caller's first request starts
within about one round of the callers waiting. ``/healthz`` and ``/metrics`` never wait.
Every event is O(1).

Each request counts to its caller's ``max_requests_per_caller`` from the moment it reaches
the turnstile to its answer (``quotas``): parked here, its body on its way, or running, so a
caller can hold no more of any of them than its cap (past it: a 429 before it parks).

What happens past the start (items waiting for workers or containers) is shared by the fair
gates (``fair_queue``); this only orders who starts using the loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from contextlib import ExitStack

from starlette.types import ASGIApp, Receive, Scope, Send

from reward_server.callers import caller_of_scope, quota_key
from reward_server.errors import TooBusy, api_error_response
from reward_server.quotas import quotas_of_scope

UNGATED = frozenset({"/healthz", "/metrics"})


class Turnstile:
    """Pure ASGI: at most ``per_turn`` requests start per turn of the event loop; callers
    take turns (see the module docstring)."""

    def __init__(self, app: ASGIApp, per_turn: int = 16) -> None:
        if per_turn < 1:
            raise ValueError(f"per_turn must be at least 1, got {per_turn}")
        self.app = app
        self.per_turn = per_turn
        self._queues: dict[Hashable, deque[asyncio.Future[None]]] = {}
        self._callers: deque[Hashable] = deque()  # those with requests waiting, in turn
        self._started = 0  # requests started in this turn of the loop
        self._pumping = False
        self.waiting = 0  # requests parked


    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNGATED:
            return await self.app(scope, receive, send)
        with ExitStack() as held:
            if (quotas := quotas_of_scope(scope)) is not None:  # (none in a bare test app)
                try:
                    # counted from here, parked or started, body on its way or answered: a
                    # caller holds no more requests than its cap, whatever stage they are at
                    held.enter_context(quotas.hold_request(caller_of_scope(scope)))
                except TooBusy as exc:
                    return await api_error_response(exc)(scope, receive, send)
            await self._turn(scope)
            await self.app(scope, receive, send)

    async def _turn(self, scope: Scope) -> None:
        if not self._callers and self._started < self.per_turn:
            self._started += 1
            self._pump_later()
            return
        key = quota_key(caller_of_scope(scope))
        queue = self._queues.get(key)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if queue is None:
            queue = self._queues[key] = deque()
            self._callers.append(key)
        queue.append(future)
        self.waiting += 1
        self._pump_later()
        await future  # cancelled (its request went while parked): the pump skips it

    def _pump_later(self) -> None:
        if not self._pumping:
            self._pumping = True
            asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        """Once per turn of the loop (a callback scheduled now runs in the next turn): a new
        turn's count, and up to ``per_turn`` parked requests started, one per caller in
        turn."""
        self._pumping = False
        self._started = 0
        while self._callers and self._started < self.per_turn:
            caller = self._callers.popleft()
            queue = self._queues[caller]
            future = queue.popleft()
            self.waiting -= 1
            if not future.cancelled():
                future.set_result(None)
                self._started += 1
            if queue:
                self._callers.append(caller)
            else:
                del self._queues[caller]
        if self._callers or self._started:
            self._pump_later()
