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


class _NeedsTwoArguments(Exception):  # its pickle cannot be loaded back
    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at {position}")


def raise_exit() -> None:
    raise SystemExit(0)


def raise_unloadable() -> None:
    raise _NeedsTwoArguments("bad token", 3)


SLOW_START_S = 1.5  # a worker's warm-up in the tests of what a replacement costs


def slow_start() -> None:
    """A warm-up that takes SLOW_START_S, as imports and warm-up take seconds in a verifier's
    workers."""
    time.sleep(SLOW_START_S)
