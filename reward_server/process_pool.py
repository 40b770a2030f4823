"""A process pool whose tasks each run under a wall-clock timeout and a memory cap.

CPU-bound checks (SymPy) cannot be interrupted from inside: ``signal.alarm`` only works on
the main thread and a C loop ignores it. Pebble's pool kills the one worker whose task ran
past its timeout and starts a replacement, leaving the other workers and their tasks alone.
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Literal, NamedTuple

from pebble import ProcessExpired, ProcessPool

Outcome = Literal["ok", "timeout", "memory", "crashed"]


class TaskResult(NamedTuple):
    outcome: Outcome
    value: Any
    detail: str | None


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
    ) -> None:
        self._pool = ProcessPool(
            max_workers=workers,
            max_tasks=max_tasks_per_worker,  # recycle: SymPy caches grow without bound
            initializer=_init_worker,
            initargs=(memory_mb, warm_up),
        )

    async def run(self, fn: Callable[..., Any], *args: Any, timeout: float) -> TaskResult:
        future = self._pool.schedule(fn, args=args, timeout=timeout)
        try:
            return TaskResult("ok", await asyncio.wrap_future(future), None)
        except FutureTimeout:
            return TaskResult("timeout", None, f"exceeded {timeout:g} s; worker killed")
        except MemoryError:
            return TaskResult("memory", None, "exceeded the worker memory cap")
        except ProcessExpired as exc:
            return TaskResult("crashed", None, f"worker died (exit code {exc.exitcode})")
        except Exception as exc:  # a bug in the task: report it on the item, keep the batch
            return TaskResult("crashed", None, f"{type(exc).__name__}: {exc}"[:200])
        except asyncio.CancelledError:
            future.cancel()  # pebble stops the worker running a cancelled task
            raise

    def close(self) -> None:
        self._pool.stop()
        self._pool.join(timeout=5)
