"""A thread that the callers share fairly, for the CPU-bound slices of their requests.

The verifiers check large requests off the event loop, a slice of items per hand-off to a
thread of their own (math's triage, ifeval's and format's checks), so the loop answers
everyone meanwhile. A plain executor serves those slices first come, first served: one
caller's dozens of large requests put every one of their slices ahead of another caller's
first (a fresh-context audit: 8 requests of 2 MiB math references held a neighbour's
ordinary batch 42 s; with a shorter budget its correct items came back null). Here a slice
takes the thread through a ``FairGate`` of one slot, so the callers with slices waiting
take it in turn by the time their slices cost, and a caller's many requests share one turn
(``fair_queue``). A slice waits at most about one slice of each other caller's.

A waiting slice is never cut by the request's budget: it is the request's own work, and
the gate already bounds its wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from reward_server.fair_queue import FairGate

T = TypeVar("T")


class FairThread:
    """One thread, its slices run one at a time in the callers' fair order."""

    def __init__(self, name: str) -> None:
        """``name``: the thread's, and its gate's in /metrics (``verifier="<name>"``)."""
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._gate = FairGate(1, name)

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the thread once the current request's turn comes."""
        async with self._gate.slot(budgeted=False):
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
