"""What a bench charges a batch: wall-clock and CPU seconds, the CPU time summed over this
process and the server with the named workers of the verifier measured.

On a machine shared with other work the wall clock also counts the others' turns, and a
request that crosses processes waits for more turns than a loop in one; CPU time does not.
Other verifiers' workers warm up for seconds after the server starts: not this cost, so only
the named workers count, and ``settle`` waits for the warm-up to end before any timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, NamedTuple

import psutil


class Cost(NamedTuple):
    wall_s: float
    cpu_s: float  # every counted process's


def cpu_s(server: psutil.Process | None = None, workers: Collection[str] = ()) -> float:
    """CPU seconds of this process, and of the server and its children named in ``workers``
    when a server is given."""
    total = time.process_time()
    for proc in [server, *server.children()] if server else []:
        try:
            if proc is server or proc.name() in workers:
                times = proc.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:  # a worker replaced meanwhile
            continue
    return total


def tree_cpu_s(server: psutil.Process) -> float:
    """CPU seconds of the server and every process under it (uvicorn's workers, math
    workers)."""
    total = 0.0
    for proc in [server, *server.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def tree_rss_mb(server: psutil.Process) -> float:
    """Resident MB of the server and every process under it."""
    total = 0
    for proc in [server, *server.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def settle(server: psutil.Process, limit_s: float = 120) -> None:
    """Until the server and all its workers are idle (under a tenth of a CPU for a second):
    their warm-up must not share the CPUs with the timed rounds."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        procs = [server, *server.children(recursive=True)]
        before = sum(sum(p.cpu_times()[:2]) for p in procs)
        time.sleep(1.0)
        if sum(sum(p.cpu_times()[:2]) for p in procs) - before < 0.1:
            return


def timed(run: Callable[[], Any], server: psutil.Process | None = None,
          workers: Collection[str] = ()) -> Cost:
    wall, cpu = time.perf_counter(), cpu_s(server, workers)
    run()
    return Cost(time.perf_counter() - wall, cpu_s(server, workers) - cpu)
