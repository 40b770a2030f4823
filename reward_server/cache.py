"""Result cache shared by the requests of one server process.

A group of G completions often ends in the same few answers; those are computed once (copies
in flight at the same time share one computation: ``slow_lane``). ``TimeoutMemory`` keeps
what the result cache must not: items that ran out of time, for a while.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache, TTLCache

V = TypeVar("V")


class ResultCache(Generic[V]):
    """The results the candidate decided, by key (LRU); ``maxsize`` 0: off.

    With ``sizeof``, the cache is bounded by bytes too (``max_bytes``, each entry counted
    with ``ENTRY_BYTES`` of overhead): a plug-in's result may be a megabyte, and 100,000 of
    them would be 100 GB. A value larger than the whole budget is not kept."""

    ENTRY_BYTES = 256

    def __init__(self, maxsize: int, max_bytes: int | None = None,
                 sizeof: Callable[[V], int] | None = None) -> None:
        self.enabled = maxsize > 0
        self._entries = max(maxsize, 1)
        if sizeof is None or max_bytes is None:
            self._done: LRUCache[Hashable, V] = LRUCache(maxsize=self._entries)
        else:
            self._done = LRUCache(maxsize=max_bytes,
                                  getsizeof=lambda v: sizeof(v) + self.ENTRY_BYTES)

    def peek(self, key: Hashable) -> tuple[V | None, bool]:
        """``(value, True)`` if ``key`` is cached, else ``(None, False)``."""
        if self.enabled and key in self._done:
            return self._done[key], True
        return None, False

    def put(self, key: Hashable, value: V) -> None:
        if not self.enabled:
            return
        try:
            self._done[key] = value
        except ValueError:  # larger than the whole byte budget: not kept
            return
        while len(self._done) > self._entries:
            self._done.popitem()  # the least recently used

    def __len__(self) -> int:
        return len(self._done)


class TimeoutMemory(Generic[V]):
    """Results of items that ran out of time (or memory), remembered for ``ttl_s``.

    The result cache keeps no timeout (the machine may only have been busy), yet a hostile
    completion is often repeated: G copies in a GRPO group, the same group a step later.
    Remembered, each copy after the first is answered at once instead of holding a worker
    for the whole time limit again.

    Only what the machine's load cannot have caused is remembered: a correct item that ran
    out of time while neighbours held the CPU must get its next run on a quiet server, not a
    remembered 0 for ten minutes. ``put(..., certain=True)`` is for an outcome load cannot
    cause (the check used its whole limit in CPU time; it ran out of memory): remembered at
    once. Any other timeout is a first strike, believed when the same key runs out of time
    again within ``ttl_s``. Keys are stored hashed: an answer may be 2,000 characters.
    """

    def __init__(self, ttl_s: float, maxsize: int = 10_000) -> None:
        self.ttl_s = ttl_s
        ttl = max(ttl_s, 1e-3)
        self._seen: TTLCache[str, tuple[V, float]] = TTLCache(maxsize, ttl=ttl)
        self._strikes: TTLCache[str, float] = TTLCache(maxsize, ttl=ttl)

    @staticmethod
    def _digest(key: Hashable) -> str:
        return hashlib.sha256(repr(key).encode("utf-8", "replace")).hexdigest()

    def get(self, key: Hashable) -> tuple[V, float] | None:
        """The remembered value and how many seconds ago it happened, or None."""
        if self.ttl_s <= 0:
            return None
        found = self._seen.get(self._digest(key))
        return None if found is None else (found[0], time.monotonic() - found[1])

    def __len__(self) -> int:
        """Keys remembered (some may have expired): 0 lets a caller skip hashing its keys."""
        return len(self._seen)

    def put(self, key: Hashable, value: V, certain: bool = False) -> bool:
        """Record a timeout; True if it is now remembered (see the class docstring)."""
        if self.ttl_s <= 0:
            return False
        digest = self._digest(key)
        if not certain and self._strikes.pop(digest, None) is None:
            self._strikes[digest] = time.monotonic()
            return False
        self._seen[digest] = (value, time.monotonic())
        return True
