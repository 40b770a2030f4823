"""A process pool whose tasks each run under a wall-clock timeout and a memory cap.

CPU-bound checks (SymPy) cannot be interrupted from inside: ``signal.alarm`` only works on
the main thread and a C loop ignores it. Pebble's pool kills the one worker whose task ran
past its timeout and starts a replacement, leaving the other workers and their tasks alone.
A worker that dies under a task (the OOM killer, an operator's kill) is replaced the same
way, and the task is run once more: only a task that kills its worker twice is reported as
``crashed``.

Pebble does not survive every death: a worker killed between tasks can make it declare the
whole pool broken, one killed after taking a task but before acknowledging it loses that
task (its future never completes), and one killed holding the queue's lock stalls the rest.
So at most ``QUEUED_PER_WORKER`` tasks per worker are handed to pebble at a time, which
bounds how long a task can legitimately take; a task past that watchdog, or a pool pebble
calls broken, gets the pool rebuilt, and the tasks that were in it are run again.

Which task is handed over next is decided in front of pebble, by a ``FairGate`` shared
between the requests in flight (``reward_server.fair_queue``): pebble's own queue is first
come, first served, so it holds one task per worker and no more; a request that arrives
behind a batch of slow tasks waits for one of them, not for the batch. A task that ran out
of time or memory is remembered for ``remember_timeouts_s`` (the task functions are pure),
so copies of it are answered at once. ``SPARE_WORKERS`` processes more than the gate's
slots are kept warm: a worker killed at its timeout takes seconds to be replaced (imports
and warm-up), and the next task, often another request's, takes a spare meanwhile.
"""

from __future__ import annotations

import asyncio
import resource
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Literal, NamedTuple

from pebble import ProcessExpired, ProcessPool

from reward_server.cache import TimeoutMemory
from reward_server.fair_queue import FairGate
from reward_server.metrics import POOL_REBUILDS, TIMEOUTS_REMEMBERED, WORKER_CRASHES

# "died" and "lost" are retried inside ``run`` and never returned.
Outcome = Literal["ok", "timeout", "memory", "crashed", "died", "lost"]
_MAX_LOSSES = 5
QUEUED_PER_WORKER = 1  # more would queue tasks first come, first served inside pebble
SPARE_WORKERS = 1
_WORKER_START_S = 15.0


class TaskResult(NamedTuple):
    outcome: Outcome
    value: Any
    detail: str | None


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Runs in the worker: the task's value and the seconds it took there (the gate charges
    a request for that, not for waiting on a worker being replaced)."""
    started = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - started, value


def _init_worker(memory_mb: int, warm_up: Callable[[], None] | None) -> None:
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if warm_up is not None:
        warm_up()


class TimeoutPool:
    def __init__(
        self,
        workers: int,
        memory_mb: int,
        warm_up: Callable[[], None] | None = None,
        max_tasks_per_worker: int = 10_000,
        retries_on_crash: int = 1,
        name: str = "math",
        remember_timeouts_s: float = 0.0,
    ) -> None:
        self.retries_on_crash = retries_on_crash
        self.name = name  # the metrics' verifier label
        self.gate = FairGate(workers * QUEUED_PER_WORKER, name)
        self._timeouts: TimeoutMemory[TaskResult] = TimeoutMemory(remember_timeouts_s)
        self._new_pool = lambda: ProcessPool(
            max_workers=workers + SPARE_WORKERS,  # only ``workers`` tasks at a time
            max_tasks=max_tasks_per_worker,  # recycle: SymPy caches grow without bound
            initializer=_init_worker,
            initargs=(memory_mb, warm_up),
        )
        self._pool = self._new_pool()

    def _rebuild(self, broken: ProcessPool) -> None:
        """Swap in a fresh pool (once per break) and stop the broken one off the loop."""
        if self._pool is broken:
            self._pool = self._new_pool()
            POOL_REBUILDS.inc()
            threading.Thread(target=_stop, args=(broken,), daemon=True).start()

    def _schedule(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float
                  ) -> tuple[ProcessPool, Future[Any]]:
        pool = self._pool
        try:
            return pool, pool.schedule(fn, args=args, timeout=timeout)
        except RuntimeError:  # pebble marked the pool broken
            self._rebuild(pool)
            return self._pool, self._pool.schedule(fn, args=args, timeout=timeout)

    async def run(self, fn: Callable[..., Any], *args: Any, timeout: float) -> TaskResult:
        """``fn(*args)`` in a worker, its turn decided by the gate. Raises
        ``fair_queue.BudgetSpent`` if the request's budget runs out before a worker is free."""
        key = (fn.__module__, fn.__qualname__, args, timeout)
        return self._remembered(key) or await self._run_retrying(fn, args, timeout, key)

    def _remembered(self, key: Hashable) -> TaskResult | None:
        found = self._timeouts.get(key)
        if found is None:
            return None
        result, age_s = found
        TIMEOUTS_REMEMBERED.labels(self.name).inc()
        return result._replace(detail=f"{result.detail} (the same task, {age_s:.0f} s ago; "
                               "remembered, not run again)")

    async def _run_retrying(self, fn: Callable[..., Any], args: tuple[Any, ...],
                            timeout: float, key: Hashable) -> TaskResult:
        deaths = losses = 0
        while True:
            result = await self._run_once(fn, args, timeout, key)
            if result.outcome == "died" and deaths < self.retries_on_crash:
                deaths += 1  # perhaps the task's own doing: once more only
            elif result.outcome == "lost" and losses < _MAX_LOSSES:
                losses += 1  # the pool broke under it: not the task's doing
            elif result.outcome in ("died", "lost"):
                return result._replace(outcome="crashed")
            else:
                return result

    async def _run_once(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float,
                        key: Hashable) -> TaskResult:
        async with self.gate.slot() as held:
            remembered = self._remembered(key)  # a copy timed out while this one waited
            if remembered is not None:
                held.cost_s = 0.0
                return remembered
            pool, future = self._schedule(_timed, (fn, *args), timeout)
            result = await self._await(pool, future, timeout)
            if result.outcome in ("timeout", "memory"):
                self._timeouts.put(key, result)
            if result.outcome != "ok":
                return result  # charged the time it held the slot
            held.cost_s, value = result.value
            return result._replace(value=value)

    async def _await(self, pool: ProcessPool, future: Future[Any], timeout: float
                     ) -> TaskResult:
        waiting = asyncio.wrap_future(future)
        try:
            # ahead of this task: at most QUEUED_PER_WORKER tasks a worker, each killed at
            # ``timeout``; plus a replacement worker's start
            done, _ = await asyncio.wait({waiting}, timeout=timeout * (QUEUED_PER_WORKER + 1)
                                         + _WORKER_START_S)
            if not done:
                future.cancel()
                self._rebuild(pool)
                return TaskResult("lost", None, "the task vanished from the worker pool")
            return TaskResult("ok", waiting.result(), None)
        except FutureTimeout:
            return TaskResult("timeout", None, f"exceeded {timeout:g} s; worker killed")
        except MemoryError:
            return TaskResult("memory", None, "exceeded the worker memory cap")
        except BrokenProcessPool:
            return TaskResult("lost", None, "the worker pool broke")
        except ProcessExpired as exc:
            WORKER_CRASHES.inc()
            return TaskResult("died", None, f"worker died (exit code {exc.exitcode})")
        except Exception as exc:  # a bug in the task: report it on the item, keep the batch
            return TaskResult("crashed", None, f"{type(exc).__name__}: {exc}"[:200])
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and not task.cancelling():  # a rebuild stopped the old pool
                return TaskResult("lost", None, "the worker pool was rebuilt")
            future.cancel()  # pebble stops the worker running a cancelled task
            raise

    def close(self) -> None:
        _stop(self._pool)


def _stop(pool: ProcessPool) -> None:
    pool.stop()
    pool.join(timeout=5)
