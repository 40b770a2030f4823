"""Result cache shared by the requests of one server process.

A group of G completions often ends in the same few answers; those are computed once. The
cache also coalesces identical keys that are in flight at the same time, so 16 copies of an
answer in one batch start one computation, not 16.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache

V = TypeVar("V")


class ResultCache(Generic[V]):
    def __init__(self, maxsize: int) -> None:
        self.enabled = maxsize > 0
        self._done: LRUCache[Hashable, V] = LRUCache(maxsize=max(maxsize, 1))
        self._pending: dict[Hashable, asyncio.Future[V]] = {}

    async def get_or_compute(
        self, key: Hashable, compute: Callable[[], Awaitable[V]], cacheable: Callable[[V], bool]
    ) -> tuple[V, bool]:
        """``(value, hit)``. Values failing ``cacheable`` (timeouts: the machine may have been
        busy) are shared with concurrent waiters but not kept."""
        if not self.enabled:
            return await compute(), False
        if key in self._done:
            return self._done[key], True
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending), True
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            value = await compute()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._pending.pop(key, None)
        future.set_result(value)
        if cacheable(value):
            self._done[key] = value
        return value, False

    def __len__(self) -> int:
        return len(self._done)
