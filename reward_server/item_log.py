"""Log lines that an item can cause (a check that failed on it, a status it chose): an
item is the attacker's, so what it wrote is cut short and escaped (no line of its own in
the log, no forged record), and such lines are logged at most once a minute per source
with a count of the rest (a request of thousands of failing items is one line, not a
flood that stalls the event loop on a slow log reader). ``/metrics`` counts every one."""

from __future__ import annotations

import logging
import time

SHOWN_CHARS = 300  # of an item's text in a log line, and in a result's detail


def quoted(text: str) -> str:
    """``text`` as a log line may show it: its first ``SHOWN_CHARS`` characters, escaped."""
    shown = repr(text[:SHOWN_CHARS])
    return shown if len(text) <= SHOWN_CHARS else shown + f" (+{len(text) - SHOWN_CHARS} chars)"


class Throttled:
    """A logger's warning, logged at most once per ``every_s`` seconds."""

    def __init__(self, logger: logging.Logger, every_s: float = 60.0) -> None:
        self.logger, self.every_s = logger, every_s
        self._last = -float("inf")
        self._left_out = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            self._left_out += 1
            return
        if self._left_out:
            message += f" (and {self._left_out} more since the last such line)"
        self._last, self._left_out = now, 0
        self.logger.warning(message, *args)
