"""How much of the server one caller may hold at once, and the 429 a client can act on.

A rollout fleet sends one request per rollout or per turn, thousands at the end of a step.
The fair gates share the workers between callers, but nothing else bounds what a caller may
queue: a runaway worker pool (or a hostile neighbour) could hold the server's memory with
requests it will answer only long after their clients gave up. So each caller may have at
most ``max_requests_per_caller`` requests (from the moment the turnstile takes one, before
its body arrives, to its answer), ``max_items_per_caller`` items and
``max_body_bytes_per_caller`` bytes of request bodies in flight, and the whole server
``max_items_in_flight`` items and ``max_body_bytes_in_flight`` bytes.
A request past a cap is answered ``429`` at once, before its items are checked or queued,
with ``Retry-After``: how long the queue it would join takes to drain enough for it, at the
rate that queue has drained lately (the caller's own rate for its caps, the server's for the
server's bound), so a client that waits that long (plus jitter: ``client.py``) comes back
when there is room, not in a stampede.

A caller here is a *quota* (``callers``): a token's name, or what an address can take
without anyone's leave (all of loopback is one), so more addresses buy no more room. A
single request larger than a cap could never be taken: it is a 413 naming the setting.

Each event costs O(1): a counter per caller and a decaying rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from reward_server import metrics
from reward_server.callers import quota_key
from reward_server.errors import PayloadTooLarge, TooBusy

RATE_WINDOW_S = 10.0  # the drain rate is that of about the last this many seconds
MAX_RETRY_AFTER_S = 60  # never tell a client to stay away longer (a drain rate may be stale)
FORGET_AFTER_S = 3 * RATE_WINDOW_S  # an idle quota's rates are ~5% of what they were by then
SWEEP_EVERY_S = 60.0  # idle quotas are forgotten this often, or when their records double
SWEEP_FROM = 1024


class DrainRate:
    """Events per second over about the last ``window_s``: an exponentially decayed count,
    corrected for a history shorter than the window (the first seconds are not read as a
    slow drain). O(1) per event."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._count = 0.0
        self._at: float | None = None
        self._since: float | None = None

    def add(self, events: float, now: float) -> None:
        self._decay(now)
        self._count += events
        if self._since is None:
            self._since = now

    def per_s(self, now: float) -> float:
        self._decay(now)
        if self._since is None:
            return 0.0
        # the weight the window's history has had so far: 1 - e^(-age/τ), τ the window
        seen = -math.expm1(-max(now - self._since, 1e-3) / self.window_s)
        return self._count / (self.window_s * seen)

    def _decay(self, now: float) -> None:
        if self._at is not None and now > self._at:
            self._count *= math.exp(-(now - self._at) / self.window_s)
        self._at = now


@dataclass
class _Holding:
    """What one quota has in flight, and how fast its requests and items have finished."""

    requests: int = 0
    items: int = 0
    requests_done: DrainRate = field(default_factory=DrainRate)
    items_done: DrainRate = field(default_factory=DrainRate)
    body_bytes: int = 0
    body_bytes_done: DrainRate = field(default_factory=DrainRate)
    idle_since: float = 0.0  # time.monotonic() when its last request was answered
    gauges: tuple[Any, ...] | None = None  # its /metrics series; () when it has none


def quotas_of_scope(scope: Mapping[str, Any]) -> Quotas | None:
    """The app's caps, once its lifespan has made them (none in a bare test app)."""
    app = scope.get("app")
    scorer = getattr(getattr(app, "state", None), "scorer", None)
    return getattr(scorer, "quotas", None)


def retry_after(excess: float, rate_per_s: float) -> int:
    """Whole seconds (1..MAX_RETRY_AFTER_S) until ``excess`` more have drained at
    ``rate_per_s``; the longest when nothing has drained lately (the queue is stuck)."""
    if rate_per_s <= 0:
        return MAX_RETRY_AFTER_S
    return max(1, min(MAX_RETRY_AFTER_S, math.ceil(excess / rate_per_s)))


class Quotas:
    """The caps of one server process; ``0`` turns a cap off."""

    def __init__(self, requests_per_caller: int, items_per_caller: int,
                 items_in_flight: int, body_bytes_per_caller: int = 0,
                 body_bytes_in_flight: int = 0) -> None:
        self.requests_per_caller = requests_per_caller
        self.items_per_caller = items_per_caller
        self.items_in_flight = items_in_flight
        self.body_bytes_per_caller = body_bytes_per_caller
        self.body_bytes_in_flight = body_bytes_in_flight
        # per quota; one with nothing in flight keeps its drain rates until a sweep
        self._held: dict[Hashable, _Holding] = {}
        self._sweep_at = SWEEP_FROM
        self._swept = time.monotonic()
        self._items = 0
        self._items_done = DrainRate()
        self._body_bytes = 0
        self._body_bytes_done = DrainRate()

    @property
    def items(self) -> int:
        return self._items

    def holding(self, caller: Hashable) -> tuple[int, int]:
        """The caller's quota's requests and items in flight."""
        held = self._held.get(quota_key(caller))
        return (0, 0) if held is None else (held.requests, held.items)

    def _record(self, caller: Hashable) -> tuple[Hashable, _Holding]:
        key = quota_key(caller)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Holding()
        return key, held

    def _check_requests(self, held: _Holding) -> None:
        """The cap on requests: those ``held`` in flight, and one."""
        cap = self.requests_per_caller
        if cap and held.requests >= cap:
            self._refuse("max_requests_per_caller", cap,
                         f"this caller has {held.requests} requests in flight",
                         held.requests + 1 - cap, held.requests_done.per_s(time.monotonic()))

    @contextmanager
    def hold_request(self, caller: Hashable) -> Iterator[None]:
        """Room for one request from the moment it is taken (before its body arrives: a
        body on its way holds a connection and memory too) to its answer, or at once
        ``TooBusy`` (429 with Retry-After). The turnstile takes it for every request."""
        key, held = self._record(caller)
        self._check_requests(held)
        held.requests += 1
        self._publish(key, held)
        try:
            yield
        finally:
            now = time.monotonic()
            held.requests -= 1
            held.requests_done.add(1, now)
            held.idle_since = now
            self._publish(key, held)
            if now - self._swept > SWEEP_EVERY_S or len(self._held) > self._sweep_at:
                self._sweep(now)

    @contextmanager
    def hold_items(self, caller: Hashable, items: int) -> Iterator[None]:
        """Room for a request's ``items`` items until its answer, or at once ``TooBusy``
        (429 with Retry-After) / ``PayloadTooLarge`` (larger than a cap)."""
        key, held = self._record(caller)
        self._admit(held, items)
        held.items += items
        self._items += items
        self._publish(key, held)
        try:
            yield
        finally:
            now = time.monotonic()
            held.items -= items
            self._items -= items
            held.items_done.add(items, now)
            self._items_done.add(items, now)
            held.idle_since = now
            self._publish(key, held)

    @contextmanager
    def hold(self, caller: Hashable, items: int) -> Iterator[None]:
        """One request of ``items`` items, taken whole (``hold_request`` then ``hold_items``)."""
        with self.hold_request(caller), self.hold_items(caller, items):
            yield

    def take_body(self, caller: Hashable, size: int) -> None:
        """``size`` more bytes of a request body held in memory until its answer, or
        ``TooBusy``: past ``max_body_bytes_per_caller`` (a caller could otherwise hold as
        many bodies of ``max_body_bytes`` as it may hold requests) or, for the whole
        server, ``max_body_bytes_in_flight``. ``give_body`` returns them."""
        _, held = self._record(caller)
        now = time.monotonic()
        for cap, setting, holding, drained, whose in (
                (self.body_bytes_per_caller, "max_body_bytes_per_caller", held.body_bytes,
                 held.body_bytes_done, "this caller's requests hold"),
                (self.body_bytes_in_flight, "max_body_bytes_in_flight", self._body_bytes,
                 self._body_bytes_done, "the server's requests hold")):
            if cap and holding + size > cap:
                self._refuse(setting, cap, f"{whose} {holding} bytes of bodies and this one "
                             f"{size} more", holding + size - cap, drained.per_s(now))
        held.body_bytes += size
        self._body_bytes += size

    def give_body(self, caller: Hashable, size: int) -> None:
        """The bytes ``take_body`` took, freed with their request."""
        _, held = self._record(caller)
        now = time.monotonic()
        held.body_bytes -= size
        self._body_bytes -= size
        held.body_bytes_done.add(size, now)
        self._body_bytes_done.add(size, now)

    def _sweep(self, now: float) -> None:
        """Forget the quotas idle for FORGET_AFTER_S: O(quotas), once a minute or when the
        records doubled since the last sweep, so O(1) per request amortised."""
        for key, held in list(self._held.items()):
            if (not (held.requests or held.items or held.body_bytes)
                    and now - held.idle_since > FORGET_AFTER_S):
                del self._held[key]
                metrics.forget_caller(key)
        self._sweep_at = max(SWEEP_FROM, 2 * len(self._held))
        self._swept = now

    def _admit(self, held: _Holding, items: int) -> None:
        for cap, setting in ((self.items_per_caller, "max_items_per_caller"),
                             (self.items_in_flight, "max_items_in_flight")):
            if cap and items > cap:
                raise PayloadTooLarge(
                    f"items: {items} items exceed {setting}={cap} (REWARD_SERVER_"
                    f"{setting.upper()}), the most this server holds at once; split the batch")
        now = time.monotonic()
        if self.items_per_caller and held.items + items > self.items_per_caller:
            self._refuse("max_items_per_caller", self.items_per_caller,
                         f"this caller has {held.items} items in flight and this request "
                         f"{items}", held.items + items - self.items_per_caller,
                         held.items_done.per_s(now))
        if self.items_in_flight and self._items + items > self.items_in_flight:
            self._refuse("max_items_in_flight", self.items_in_flight,
                         f"the server has {self._items} items in flight and this request "
                         f"{items}", self._items + items - self.items_in_flight,
                         self._items_done.per_s(now))

    @staticmethod
    def _refuse(setting: str, cap: int, why: str, excess: int, rate_per_s: float) -> None:
        seconds = retry_after(excess, rate_per_s)
        metrics.REQUESTS_REFUSED.labels(setting).inc()
        raise TooBusy(f"{why}, over {setting}={cap} (REWARD_SERVER_{setting.upper()}); "
                      f"retry after {seconds} s, when about that much will have drained",
                      seconds)

    @staticmethod
    def _publish(key: Hashable, held: _Holding) -> None:
        if held.gauges is None:  # found once per record: ``labels()`` costs a lock and a key
            label = metrics.caller_label(key)
            held.gauges = () if label is None else (metrics.CALLER_REQUESTS.labels(label),
                                                    metrics.CALLER_ITEMS.labels(label))
        if held.gauges:
            held.gauges[0].set(held.requests)
            held.gauges[1].set(held.items)
