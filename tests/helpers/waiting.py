"""Waiting for a state the server reaches on its own (a reaper, a container's removal): a
bound against a hang, polled, never a timing asserted."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(check: Callable[[], bool], timeout_s: float = 90, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.25)
