"""TimeoutPool and ResultCache as units: a timed-out task kills only its worker, a memory hog
hits the cap, identical keys in flight are computed once, a request behind a slow batch
waits for one task and not the batch, a budget cuts what still waits, and a timeout is
remembered for copies of the same task."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from reward_server.cache import ResultCache, TimeoutMemory
from reward_server.fair_queue import BudgetSpent, request_scope
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


async def test_a_request_behind_a_slow_batch_waits_for_one_task_not_the_batch(
        pool: TimeoutPool) -> None:
    finished: list[str] = []

    async def task(tag: str, fn, *args, timeout: float) -> None:
        await pool.run(fn, *args, timeout=timeout)
        finished.append(tag)

    async def slow_batch() -> None:
        with request_scope(None):
            await asyncio.gather(*(task(f"slow{k}", spin, timeout=1.0 + k / 100)
                                   for k in range(6)))

    async def honest() -> None:
        await asyncio.sleep(0.3)  # both workers now spin; four slow tasks wait
        with request_scope(None):
            await asyncio.gather(*(task("honest", pid_after, 0.0, timeout=5.0)
                                   for _ in range(4)))

    await asyncio.gather(slow_batch(), honest())
    # first come, first served would finish all six slow tasks first
    assert finished.index("honest") < 3 and finished[:6].count("honest") == 4, finished


async def test_budget_cuts_waiting_tasks_and_a_timeout_is_remembered() -> None:
    pool = TimeoutPool(workers=1, memory_mb=512, remember_timeouts_s=60)
    try:
        with request_scope(0.5):
            out = await asyncio.gather(*(pool.run(spin, timeout=1.0 + k / 100)
                                         for k in range(3)), return_exceptions=True)
        assert out[0].outcome == "timeout"  # it held the only worker when the budget ran out
        assert all(isinstance(e, BudgetSpent) for e in out[1:]), out
        started = time.monotonic()
        again = await pool.run(spin, timeout=1.0)  # the same task: not run again
        assert again.outcome == "timeout" and "remembered" in (again.detail or "")
        assert time.monotonic() - started < 0.5
        other = await pool.run(pid_after, 0.0, timeout=5.0)
        assert other.outcome == "ok"
    finally:
        pool.close()


def test_timeout_memory_expires_and_can_be_off() -> None:
    memory: TimeoutMemory[str] = TimeoutMemory(ttl_s=0.2)
    memory.put(("check", "x" * 5000), "timeout")
    found = memory.get(("check", "x" * 5000))
    assert found is not None and found[0] == "timeout" and 0 <= found[1] < 0.2
    assert memory.get(("check", "y")) is None
    time.sleep(0.3)
    assert memory.get(("check", "x" * 5000)) is None
    off: TimeoutMemory[str] = TimeoutMemory(ttl_s=0)
    off.put("k", "timeout")
    assert off.get("k") is None


async def test_cache_follower_of_a_request_cut_by_its_budget_computes_for_itself() -> None:
    cache: ResultCache[str] = ResultCache(maxsize=10)
    calls = 0

    async def cut() -> str:
        await asyncio.sleep(0.05)
        raise BudgetSpent("not run: budget")

    async def compute() -> str:
        nonlocal calls
        calls += 1
        return "v"

    leader = asyncio.ensure_future(cache.get_or_compute("k", cut, lambda v: True))
    await asyncio.sleep(0.01)
    follower = await cache.get_or_compute("k", compute, lambda v: True)
    with pytest.raises(BudgetSpent):
        await leader
    assert follower == ("v", False) and calls == 1


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
