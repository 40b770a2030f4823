"""Tasks for the scoring process pool (module level, so a worker can unpickle them)."""

from __future__ import annotations

import os
import time


def spin() -> None:
    while True:
        pass


def pid_after(delay: float) -> int:
    time.sleep(delay)
    return os.getpid()
