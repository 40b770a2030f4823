"""A big request on a thread of its own and small requests over and over while it runs, with
the CPU time the server process spent meanwhile (which the machine's load does not inflate as
it does the wall clock): whether what a worker takes long over holds up the others."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from reward_server.testing import ServerProcess
from tests.helpers.cpu import server_cpu_s

T = TypeVar("T")


def beside_a_big_request(srv: ServerProcess, big: Callable[[], T],
                         small: Callable[[Callable[[], bool]], None], head_start_s: float,
                         most: int = 20) -> tuple[T | None, int, float]:
    """Starts ``big()`` on a thread; ``head_start_s`` later calls ``small(answered)`` while it
    runs, at most ``most`` times, 50 ms apart (``answered()``: whether big's answer is in);
    then waits up to 120 s for it. Big's result (None if it never came), how many times
    ``small`` ran, and the server process's CPU seconds over it all."""
    done: dict[str, T] = {}
    cpu_before = server_cpu_s(srv)
    thread = threading.Thread(target=lambda: done.setdefault("big", big()))
    thread.start()
    time.sleep(head_start_s)
    count = 0
    while thread.is_alive() and count < most:
        small(lambda: "big" in done)
        count += 1
        time.sleep(0.05)
    thread.join(120)
    return done.get("big"), count, server_cpu_s(srv) - cpu_before
