"""TimeoutPool, ResultCache and TimeoutMemory as units: a slow task is stopped inside its warm
worker, one deaf to signals kills only its worker, a memory hog hits the cap, a task killed
from outside runs again (and is unscorable past the limit) while one that ends its own worker
scores as crashed, identical keys in flight are computed once, and a timeout that load cannot
have caused is believed at once, any other the second time. The lane in front of the pool
(gate, budget, memory) is tests/reward_server/test_slow_lane.py."""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import time

import psutil
import pytest

from reward_server.cache import ResultCache, TimeoutMemory
from reward_server.process_pool import MAX_OUTSIDE_LOSSES, TimeoutPool
from tests.helpers.pool_tasks import SLOW_START_S, pid_after, slow_start, spin

pytestmark = pytest.mark.slow  # worker processes, killed and replaced: seconds a test


def deaf_spin() -> None:
    """C code that never returns to the interpreter: the soft alarm cannot stop it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    spin()


def swallow_spin() -> str:
    """A task whose own handler catches everything (as SymPy's do) and carries on."""
    try:
        spin()
    except BaseException:
        pass
    return "wrong verdict"


def abort() -> None:
    faulthandler.disable()  # inherited from pytest: no traceback for an expected abort
    os.abort()  # what C code does when an allocation fails under the cap


def named_sleep(delay: float) -> int:
    """Names its worker ``NAMED`` where the test can find it (a worker may write no file),
    then works for ``delay``."""
    import ctypes

    ctypes.CDLL(None).prctl(15, NAMED.encode(), 0, 0, 0)  # PR_SET_NAME: its own comm
    time.sleep(delay)
    return os.getpid()


NAMED = "named-sleep"


def hog() -> int:
    return len(bytearray(2 * 1024**3))


@pytest.fixture
def pool():
    p = TimeoutPool(workers=2, memory_mb=512)
    yield p
    p.close()


def _workers() -> set[int]:
    """The pools' workers: children of the forkserver, a child of this process."""
    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name() == "worker" and p.status() != psutil.STATUS_ZOMBIE:
                found.add(p.pid)
        except psutil.Error:
            continue
    return found


async def test_soft_limit_stops_the_task_and_keeps_its_worker(pool: TimeoutPool) -> None:
    await asyncio.gather(*(pool.run(pid_after, 0.1, timeout=5.0) for _ in range(3)))
    before = _workers()
    for slow in (spin, swallow_spin):
        result = await pool.run(slow, timeout=1.0)
        assert result.outcome == "timeout", result
        assert "stopped in its worker" in (result.detail or "")
    assert _workers() == before  # no worker was killed or replaced
    after = await pool.run(pid_after, 0.0, timeout=5.0)
    assert after.outcome == "ok" and after.value in before


async def test_timeout_kills_only_that_task(pool: TimeoutPool) -> None:
    # the outer deadline only keeps a hang (a deaf task never killed) from hanging the suite
    slow, fast = await asyncio.wait_for(asyncio.gather(pool.run(deaf_spin, timeout=1.0),
                                                       pool.run(pid_after, 0.2, timeout=5.0)),
                                        timeout=60)
    assert slow.outcome == "timeout" and "worker killed" in (slow.detail or "")
    assert fast.outcome == "ok" and isinstance(fast.value, int)
    after = await pool.run(pid_after, 0.0, timeout=10.0)  # the pool still has workers
    assert after.outcome == "ok"


async def test_memory_cap(pool: TimeoutPool) -> None:
    result = await pool.run(hog, timeout=10.0)
    assert result.outcome == "memory"


async def test_exceptions_are_results(pool: TimeoutPool) -> None:
    result = await pool.run(int, "not a number", timeout=5.0)
    assert result.outcome == "crashed" and "ValueError" in (result.detail or "")


async def test_a_task_raising_system_exit_is_crashed_and_the_server_goes_on(
        pool: TimeoutPool) -> None:
    """pebble sends a task's BaseException back as its result: re-raised in the server, a
    SystemExit ended the server process."""
    from tests.helpers.pool_tasks import raise_exit

    result = await pool.run(raise_exit, timeout=5.0)
    assert result.outcome == "crashed" and "SystemExit" in (result.detail or ""), result
    assert (await pool.run(int, "7", timeout=5.0)).value == 7


async def test_a_task_whose_exception_cannot_be_loaded_is_crashed_alone(
        pool: TimeoutPool) -> None:
    from tests.helpers.pool_tasks import raise_unloadable

    neighbour = asyncio.ensure_future(pool.run(pid_after, 1.0, timeout=10.0))
    result = await pool.run(raise_unloadable, timeout=5.0)
    assert result.outcome in ("crashed", "unavailable"), result
    assert (await neighbour).outcome == "ok"  # another task's verdict untouched


async def test_a_task_that_ends_its_own_worker_twice_is_crashed(pool: TimeoutPool) -> None:
    result = await pool.run(abort, timeout=10.0)
    assert result.outcome == "crashed", result
    assert "2 times" in (result.detail or "")
    assert (await pool.run(pid_after, 0.0, timeout=10.0)).outcome == "ok"


async def test_a_task_that_costs_its_worker_pays_for_its_replacements_start() -> None:
    """A replacement worker pays its start (imports and warm-up; here a warm-up of
    SLOW_START_S): a task that costs its worker reports it in its cost, which the verifier
    charges its caller at the fair gate, as well as its runs; it was charged its run only,
    and every caller paid for the replacement. A task that keeps its worker costs its run."""
    pool = TimeoutPool(workers=1, memory_mb=512, warm_up=slow_start)
    try:
        ok = await pool.run(pid_after, 0.0, timeout=30.0)
        assert ok.outcome == "ok" and ok.cost_s is not None and ok.cost_s < SLOW_START_S, ok
        killed = await pool.run(deaf_spin, timeout=1.0)
        assert killed.outcome == "timeout" and "worker killed" in (killed.detail or "")
        assert killed.cost_s is not None and killed.cost_s >= 1.0 + SLOW_START_S, killed
        crashed = await pool.run(abort, timeout=30.0)
        assert crashed.outcome == "crashed", crashed  # ended its worker twice: two starts
        assert crashed.cost_s is not None and crashed.cost_s >= 2 * SLOW_START_S, crashed
        assert pool.worker_start_s >= SLOW_START_S  # as the workers measured their own
    finally:
        pool.close()


async def _kill_runs(pool: TimeoutPool, kills: int) -> tuple[object, int]:
    """Runs ``named_sleep`` and SIGKILLs the worker of each of its first ``kills`` runs from
    outside, as an operator or the OOM killer would."""
    task = asyncio.ensure_future(pool.run(named_sleep, 1.0, timeout=20.0))
    killed: set[int] = set()
    while not task.done():
        await asyncio.sleep(0.05)
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] == NAMED and proc.pid not in killed and len(killed) < kills:
                os.kill(proc.pid, signal.SIGKILL)
                killed.add(proc.pid)
    return task.result(), len(killed)


async def test_a_task_killed_from_outside_runs_again(pool: TimeoutPool) -> None:
    result, killed = await _kill_runs(pool, kills=3)
    assert killed == 3
    assert result.outcome == "ok", result  # three kills in a row are not the task's doing


async def test_a_task_killed_from_outside_without_end_is_unavailable(
        pool: TimeoutPool) -> None:
    result, killed = await _kill_runs(pool, kills=100)
    assert killed == MAX_OUTSIDE_LOSSES + 1
    assert result.outcome == "unavailable" and "SIGKILL" in (result.detail or ""), result


def test_timeout_memory_believes_a_certain_timeout_at_once_and_others_twice() -> None:
    memory: TimeoutMemory[str] = TimeoutMemory(ttl_s=60)
    assert memory.put("cpu", "timeout", certain=True) and memory.get("cpu") is not None
    assert not memory.put("load", "timeout") and memory.get("load") is None
    assert memory.put("load", "timeout") and memory.get("load") is not None


def test_timeout_memory_expires_and_can_be_off() -> None:
    memory: TimeoutMemory[str] = TimeoutMemory(ttl_s=0.2)
    memory.put(("check", "x" * 5000), "timeout", certain=True)
    found = memory.get(("check", "x" * 5000))
    assert found is not None and found[0] == "timeout" and 0 <= found[1] < 0.2
    assert memory.get(("check", "y")) is None
    time.sleep(0.3)
    assert memory.get(("check", "x" * 5000)) is None
    off: TimeoutMemory[str] = TimeoutMemory(ttl_s=0)
    off.put("k", "timeout", certain=True)
    assert off.get("k") is None


def test_cache_keeps_what_it_is_given_and_nothing_when_off() -> None:
    cache: ResultCache[str] = ResultCache(maxsize=2)
    assert cache.peek("k") == (None, False)
    cache.put("k", "v")
    assert cache.peek("k") == ("v", True)
    cache.put("a", "1")
    cache.put("b", "2")  # least recently used goes
    assert cache.peek("k") == (None, False) and len(cache) == 2
    off: ResultCache[str] = ResultCache(maxsize=0)
    off.put("k", "v")
    assert off.peek("k") == (None, False)


def test_prestart_starts_every_worker_before_the_first_task() -> None:
    """pebble starts workers at the first task: a fresh server's first request waited for
    their imports and warm-up, and its memory tripled under it (read as a leak)."""
    before = _workers()
    pool = TimeoutPool(workers=2, memory_mb=512)
    try:
        pool.prestart()
        deadline = time.monotonic() + 20
        while len(_workers() - before) < 3:
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.05)
    finally:
        pool.close()


def test_a_cache_with_a_byte_budget_keeps_no_more_than_it() -> None:
    """A plug-in's result may be a megabyte: the cache counts bytes, not only entries, and
    keeps the most recent results that fit; one over the whole budget is not kept."""
    cache: ResultCache[str] = ResultCache(100, max_bytes=10_000, sizeof=len)
    for k in range(20):
        cache.put(k, "x" * 1000)
    kept = [k for k in range(20) if cache.peek(k)[1]]
    assert kept == list(range(13, 20))  # 7 × (1,000 + 256 of overhead) fit in 10,000
    cache.put("huge", "x" * 20_000)
    assert cache.peek("huge") == (None, False) and cache.peek(19)[1]
    few: ResultCache[str] = ResultCache(3, max_bytes=10_000, sizeof=len)
    for k in range(5):
        few.put(k, "x")
    assert [k for k in range(5) if few.peek(k)[1]] == [2, 3, 4]  # entries are still capped
