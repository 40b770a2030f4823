"""A process pool whose tasks each run under a wall-clock timeout and a memory cap.

CPU-bound checks (SymPy) cannot be interrupted from another thread, and a C loop ignores
signals. So each task has two limits. The soft one (``SOFT_LIMIT`` of the timeout) is a
``SIGALRM`` in the worker, whose tasks pebble runs on the main thread: Python code is
stopped, the task comes back ``timeout`` and the worker stays warm (a replacement pays
seconds of imports and warm-up). The hard one is pebble's: it kills the one worker whose
task ran past the timeout (C code that never returns to the interpreter) and starts a
replacement, leaving the other workers and their tasks alone.

Who killed a worker decides what its task gets (a wrong reward is the worst defect):

- killed by ``SIGKILL`` while running the task: from outside the worker (an operator, the
  OOM killer acting on memory used elsewhere). The pool's own kills are timeouts, reported
  as such, and the address-space cap turns a memory bomb into a ``MemoryError`` inside the
  worker (outcome ``memory``), so the task could not have caused it. The task runs again,
  up to ``MAX_OUTSIDE_LOSSES`` times; past that it is ``unavailable`` (unscorable, not 0).
- died any other way (``SIGSEGV``, ``SIGABRT`` from a failed allocation in C, an exit):
  the worker ended itself running this task. It runs once more (``retries_on_crash``), and
  a task that ends its worker again is ``crashed``, which the verifier scores 0.
- the pool lost the task (see below): not the task's doing, counted as an outside kill.

Pebble does not survive every death: a worker killed between tasks can make it declare the
whole pool broken, one killed after taking a task but before acknowledging it loses that
task (its future never completes), and one killed holding the queue's lock stalls the rest.
So at most ``QUEUED_PER_WORKER`` tasks per worker are handed to pebble at a time, which
bounds how long a task can legitimately take; a task past that watchdog, or a pool pebble
calls broken, gets the pool rebuilt, and the tasks that were in it are run again.

A task that costs its worker (killed at its hard timeout, or ending its worker itself) is
charged, at the gate, for the replacement's start as well as its own run: a replacement pays
seconds of imports and warm-up, and a caller whose items keep killing workers would otherwise
have every other caller pay for them. The start is what the pool's workers measured of their
own (``worker_start_s``: from the process's creation to the end of its warm-up).

Pebble's own queue is first come, first served, so which task is handed over next is decided
in front of it: the pool is meant to sit behind a gate of ``workers`` slots (the verifier's
``slow_lane.SlowLane``, whose ``FairGate`` shares the workers between the requests in flight),
so pebble holds one task per worker and no more, and a request that arrives behind a batch of
slow tasks waits for one of them, not for the batch. Each result says what the lane needs: the
task's own cost (``cost_s``, measured inside its worker) and, for a timeout, whether it used
its limit in CPU time (``cpu_bound``: the machine's load cannot have caused it).
``SPARE_WORKERS`` processes more than the gate's slots are kept warm: a worker killed at its
timeout takes seconds to be replaced (imports and warm-up), and the next task, often another
request's, takes a spare meanwhile.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Literal, NamedTuple

from pebble import ProcessExpired, ProcessPool

from reward_server import worker_isolation
from reward_server.libc import PR_SET_NAME, prctl
from reward_server.metrics import POOL_REBUILDS, WORKER_CRASHES

# "died", "killed" and "lost" are retried inside ``run`` and never returned.
Outcome = Literal["ok", "timeout", "memory", "crashed", "unavailable", "died", "killed",
                  "lost"]
MAX_OUTSIDE_LOSSES = 5  # kills from outside and pool losses one task may meet
SOFT_LIMIT = 0.85  # of the timeout: the worker stops Python code itself, and stays warm
QUEUED_PER_WORKER = 1  # more would queue tasks first come, first served inside pebble
SPARE_WORKERS = 1
# A soft timeout with at least this share of its limit in CPU time was the task's own work;
# one with less may have waited for a CPU that other processes held (cache.TimeoutMemory)
CPU_BOUND = 0.9
_WORKER_START_S = 15.0


class TaskResult(NamedTuple):
    outcome: Outcome
    value: Any
    detail: str | None
    # seconds the task ran in its worker, when it returned there; for a task that cost its
    # worker, its runs' time and each replacement's start
    cost_s: float | None = None
    cpu_bound: bool = False  # a soft timeout with its limit used in CPU time


class _SoftTimeout(BaseException):
    """Raised by the worker's alarm; a BaseException, so ``except Exception`` in SymPy or
    math-verify does not swallow it."""


class _Alarm:
    """The soft limit: ``SIGALRM`` on the worker's main thread while a task runs. While
    ``held`` (``soft_limit_held``) it only notes it is ``due``: a signal mask cannot hold
    it back, since the kernel gives a process's alarm to any thread not blocking it and
    Python runs the handler on the main thread regardless."""

    def __init__(self) -> None:
        self.armed = self.fired = self.due = False
        self.held = 0

    def __call__(self, signum: int, frame: Any) -> None:
        if not self.armed:
            return
        if self.held:
            self.due = True
            return
        self.fired = True
        raise _SoftTimeout


_running: list[_Alarm | None] = [None]  # the running task's alarm, in a worker


@contextlib.contextmanager
def soft_limit_held() -> Iterator[None]:
    """The soft limit's exception held back for a step that must not be cut in two (a
    check's hand-over with its zygote): the step watches ``soft_limit_left`` itself, and
    the timeout is raised as it ends, if it came due meanwhile."""
    alarm = _running[0]
    if alarm is None:
        yield
        return
    alarm.held += 1
    try:
        yield
    finally:
        alarm.held -= 1
        if not alarm.held and alarm.due and alarm.armed:
            alarm.fired = True
            raise _SoftTimeout


def soft_limit_left() -> float | None:
    """Seconds until the running task's soft limit: 0.0 once it is due, ``None`` outside a
    task (no limit)."""
    alarm = _running[0]
    if alarm is None or not alarm.armed:
        return None
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    return 0.0 if alarm.due or left <= 0 else left


def _timed(fn: Callable[..., Any], soft_s: float, *args: Any
           ) -> tuple[float, float, bool, Any, float]:
    """Runs in the worker: the seconds the task took there (the gate charges a request for
    that, not for waiting on a worker being replaced), the CPU seconds it used (a timeout
    with little CPU time is the machine's load, not the task's), whether it hit the soft
    limit, its value, and what this worker's own start took (``worker_start_s``). Once the
    alarm fired the task is a timeout, whatever a handler in it made of the exception."""
    alarm = _Alarm()
    previous = signal.signal(signal.SIGALRM, alarm)
    started = time.perf_counter()
    cpu_started = _cpu_seconds()
    value = None
    _running[0] = alarm
    try:
        alarm.armed = True
        signal.setitimer(signal.ITIMER_REAL, soft_s)
        try:
            value = fn(*args)
        except (_SoftTimeout, MemoryError):
            raise
        except BaseException as exc:  # noqa: BLE001 - sent back as text, never as itself
            value = _Raised(_describe(exc))
        alarm.armed = False
    except _SoftTimeout:
        alarm.fired = True
    finally:
        alarm.armed = False
        _running[0] = None
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return (time.perf_counter() - started, _cpu_seconds() - cpu_started, alarm.fired, value,
            _started_in_s[0])


_charged = [0.0]  # CPU seconds used for this worker's tasks in processes not its own
_started_in_s = [0.0]  # seconds from this worker's creation to the end of its warm-up


def _process_age_s() -> float:
    """Seconds since this process was created (``/proc/self/stat``'s start time, in clock
    ticks since boot); 0.0 where there is no such file."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))


def worker_start_seconds() -> float:
    """In a worker: what its start took, from its creation to the end of its warm-up."""
    return _started_in_s[0]


def charge_cpu(seconds: float) -> None:
    """Count ``seconds`` of CPU time, used by another process for the running task (a
    plug-in's check runs in a child of the worker's zygote), as the task's own."""
    _charged[0] += seconds


def _cpu_seconds() -> float:
    """The worker's CPU time, its reaped children's and what was charged to it: a task
    whose work runs in another process used its limit there, not in the waiting worker."""
    times = os.times()
    return (times.user + times.system + times.children_user + times.children_system
            + _charged[0])


class _Raised(NamedTuple):
    """A task's exception, as text. pebble sends a task's exception back pickled, and the
    server re-raised it: a ``SystemExit`` ended the server, and one whose pickle cannot be
    loaded (an ``__init__`` with two arguments) broke the pool under every other task."""

    detail: str


def _describe(exc: BaseException) -> str:
    """The exception's type and text (200 characters), whatever its ``__str__`` does."""
    try:
        return f"{type(exc).__name__}: {exc}"[:200]
    except BaseException:  # noqa: BLE001 - a __str__ that raises says nothing more
        return type(exc).__name__[:200]


def _init_worker(memory_mb: int, warm_up: Callable[[], None] | None, name: str,
                 confinement: worker_isolation.Policy | None) -> None:
    worker_isolation.isolate(confinement)  # before anything reads a caller's text
    # The cap is on what the worker adds to the address space it was forked with: a worker
    # forked later inherits the server's size then (its threads' stacks and malloc arenas,
    # more pools), and with an absolute cap a replacement forked from a 1 GB server had no
    # room left, so its tasks failed (a correct answer read as a parse_error, or a crash)
    limit = _address_space() + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _name_process(name)
    if warm_up is not None:
        warm_up()
    _started_in_s[0] = _process_age_s()


def _address_space() -> int:
    """This process's virtual size in bytes (``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def _name_process(name: str) -> None:
    """The worker's name in ``ps``/``top`` (Linux's 15 characters): which verifier's pool a
    process belongs to, for an operator (and the fault tests) to tell them apart."""
    try:
        prctl(PR_SET_NAME, name.encode()[:15])
    except (OSError, AttributeError):
        pass


class TimeoutPool:
    def __init__(
        self,
        workers: int,
        memory_mb: int,
        warm_up: Callable[[], None] | None = None,
        max_tasks_per_worker: int = 10_000,
        retries_on_crash: int = 1,
        name: str = "worker",
        signal_others: bool = False,
    ) -> None:
        self.retries_on_crash = retries_on_crash
        self.slots = workers * QUEUED_PER_WORKER  # tasks to hand it at a time
        # what starting a worker takes, as the last one to answer measured its own (0.0
        # until one has): what a task that costs its worker is charged for its replacement
        self.worker_start_s = 0.0
        # the watchdog in ``_await`` assumes no more are in pebble: a caller without a gate
        # of ``slots`` (tests, scripts) waits here, first come, first served
        self._handed = asyncio.Semaphore(self.slots)
        worker_isolation.check_installation()
        self._scratch = worker_isolation.make_scratch(name)
        confinement = worker_isolation.policy(self._scratch, signal_others)
        context = worker_isolation.context()  # workers are never forks of the server
        self._new_pool = lambda: ProcessPool(
            max_workers=workers + SPARE_WORKERS,  # only ``workers`` tasks at a time
            max_tasks=max_tasks_per_worker,  # recycle: SymPy caches grow without bound
            initializer=_init_worker,
            initargs=(memory_mb, warm_up, name, confinement),
            context=context,
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
        """``fn(*args)`` in a worker under ``timeout``; run again where the worker died of
        something the task did not do (see the module docstring)."""
        async with self._handed:
            return await self._run_retrying(fn, args, timeout)

    async def _run_retrying(self, fn: Callable[..., Any], args: tuple[Any, ...],
                            timeout: float) -> TaskResult:
        deaths = outside = 0
        lost_s = 0.0  # this task's runs that cost their worker, and each replacement's start
        while True:
            started = time.perf_counter()
            result = await self._run_once(fn, args, timeout)
            run_s = time.perf_counter() - started
            if result.outcome == "died" or (result.outcome == "timeout"
                                            and result.cost_s is None):  # killed at its limit
                lost_s += run_s + self.worker_start_s
                run_s = 0.0  # counted
            if result.outcome == "died":  # the worker ended itself under this task
                if deaths >= self.retries_on_crash:
                    return result._replace(outcome="crashed", cost_s=lost_s, detail=(
                        f"{result.detail}, {deaths + 1} times running this task"))
                deaths += 1
            elif result.outcome in ("killed", "lost"):  # not the task's doing
                if outside >= MAX_OUTSIDE_LOSSES:
                    return _charged_for(result._replace(outcome="unavailable", detail=(
                        f"not scored: {result.detail}, {outside + 1} times running "
                        "this task")), lost_s, run_s)
                outside += 1
            else:
                return _charged_for(result, lost_s, run_s)

    async def _run_once(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float
                        ) -> TaskResult:
        pool, future = self._schedule(_timed, (fn, timeout * SOFT_LIMIT, *args), timeout)
        result = await self._await(pool, future, timeout)
        if result.outcome != "ok":
            return result
        cost_s, cpu_s, soft_timeout, value, self.worker_start_s = result.value
        if soft_timeout:
            return TaskResult("timeout", None, f"exceeded {timeout:g} s; stopped in its worker",
                              cost_s, cpu_s >= CPU_BOUND * timeout * SOFT_LIMIT)
        if isinstance(value, _Raised):  # a bug in the task: reported on the item
            return TaskResult("crashed", None, value.detail, cost_s)
        return TaskResult("ok", value, None, cost_s)

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
            if exc.exitcode == -signal.SIGKILL:
                return TaskResult("killed", None, "its worker was killed (SIGKILL)")
            return TaskResult("died", None, f"its worker died (exit code {exc.exitcode})")
        except ImportError as exc:  # the worker's uid cannot read the task's module: ours
            return TaskResult("unavailable", None, f"not scored: the worker cannot import "
                              f"its code ({exc})"[:300])
        except Exception as exc:  # a bug in the task: report it on the item, keep the batch
            return TaskResult("crashed", None, f"{type(exc).__name__}: {exc}"[:200])
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and not task.cancelling():  # a rebuild stopped the old pool
                return TaskResult("lost", None, "the worker pool was rebuilt")
            future.cancel()  # pebble stops the worker running a cancelled task
            raise

    def prestart(self) -> None:
        """Start the workers now, in the background, instead of at the first task: pebble
        starts them lazily, so a fresh server's first items waited for every worker's import
        and warm-up, and its memory tripled under the first request (three workers of ~100 MB
        appearing at once, which read as a leak). The first to answer says what its start
        took (``worker_start_s``)."""
        self._pool.schedule(worker_start_seconds).add_done_callback(self._started)

    def _started(self, future: Future[float]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.worker_start_s = future.result()

    def close(self) -> None:
        _stop(self._pool)
        shutil.rmtree(self._scratch, ignore_errors=True)


def _charged_for(result: TaskResult, lost_s: float, run_s: float) -> TaskResult:
    """``result`` with its task's runs that cost their worker added to its cost (``lost_s``),
    and where it measured none, its own run's time (``run_s``), which the gate would have
    charged as the time its slot was held."""
    if not lost_s:
        return result
    own = result.cost_s if result.cost_s is not None else run_s
    return result._replace(cost_s=lost_s + own)


def _stop(pool: ProcessPool) -> None:
    pool.stop()
    pool.join(timeout=5)
