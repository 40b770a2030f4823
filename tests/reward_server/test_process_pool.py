"""TimeoutPool and ResultCache as units: a timed-out task kills only its worker, a memory hog
hits the cap, and identical keys in flight are computed once."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from reward_server.cache import ResultCache
from reward_server.process_pool import TimeoutPool


def spin() -> None:
    while True:
        pass


def hog() -> int:
    return len(bytearray(2 * 1024**3))


def pid_after(delay: float) -> int:
    time.sleep(delay)
    return os.getpid()


@pytest.fixture
def pool():
    p = TimeoutPool(workers=2, memory_mb=512)
    yield p
    p.close()


async def test_timeout_kills_only_that_task(pool: TimeoutPool) -> None:
    started = time.monotonic()
    slow, fast = await asyncio.gather(pool.run(spin, timeout=1.0),
                                      pool.run(pid_after, 0.2, timeout=5.0))
    assert slow.outcome == "timeout" and "worker killed" in (slow.detail or "")
    assert fast.outcome == "ok" and isinstance(fast.value, int)
    assert time.monotonic() - started < 5
    after = await pool.run(pid_after, 0.0, timeout=10.0)  # the pool still has workers
    assert after.outcome == "ok"


async def test_memory_cap(pool: TimeoutPool) -> None:
    result = await pool.run(hog, timeout=10.0)
    assert result.outcome == "memory"


async def test_exceptions_are_results(pool: TimeoutPool) -> None:
    result = await pool.run(int, "not a number", timeout=5.0)
    assert result.outcome == "crashed" and "ValueError" in (result.detail or "")


async def test_cache_coalesces_in_flight_and_skips_uncacheable() -> None:
    cache: ResultCache[str] = ResultCache(maxsize=10)
    calls = 0

    async def compute() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return "v"

    out = await asyncio.gather(*(cache.get_or_compute("k", compute, lambda v: True)
                                 for _ in range(5)))
    assert calls == 1 and [v for v, _ in out] == ["v"] * 5
    assert sorted(hit for _, hit in out) == [False, True, True, True, True]
    assert await cache.get_or_compute("k", compute, lambda v: True) == ("v", True)
    await cache.get_or_compute("t", compute, lambda v: False)
    await cache.get_or_compute("t", compute, lambda v: False)
    assert calls == 3  # an uncacheable value (a timeout) is computed again next time


async def test_cache_off_computes_every_time() -> None:
    cache: ResultCache[int] = ResultCache(maxsize=0)

    async def compute() -> int:
        return 1

    for _ in range(3):
        assert await cache.get_or_compute("k", compute, lambda v: True) == (1, False)
