"""An assertion job's one turn, and the clock on its trusted code.

A stdin/stdout item's tests share nothing but files its program wrote, so one that outlasts
its turn while other items wait stops between two tests and the host runs the rest in
another turn. An assertion job's tests share the solution's process: its module state
(a cache, a counter, a default argument that grows) is what a later call sees, as it is in
MBPP's, HumanEval's and LiveCodeBench's own graders, which run every test in one process. A
later turn could not have that process (the container is swept and given to whoever waits:
two callers' processes never share one), so it would load the solution afresh, and a
solution right only on its first call would pass each turn's first test: its reward would
depend on how many other items happened to be waiting. So an assertion job never takes
turns. It runs in one, of at most ``unsplit_s`` (the longest one test may take) from its
start: setup, load and every test; tests that time does not reach are timeouts, whatever
else is waiting. Its verdict is the one it gets alone, and it holds a container no longer
than a single test may (PID 1 keeps that clock too: ``tester``).

Trusted code has a clock too (``trusted_clock``): a test's own expression, ``test_setup``
and the test code's statements run in the tester, and a loop there would otherwise hold the
container until the host gave up on it.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

TRUSTED_GRACE_S = 0.5  # past a test's limit before its trusted code is stopped
TRUSTED_REPEAT_S = 0.1  # and again this often, for test code that swallowed the first


class TrustedTimeout(BaseException):
    """Trusted code ran past its limit (a BaseException: the test code's ``except
    Exception`` must not take it for a failed assertion of its own)."""


_armed = False


def _expire(signum, frame):
    if _armed:
        raise TrustedTimeout


@contextmanager
def trusted_clock(seconds):
    """Run the body under a wall-clock limit: ``TrustedTimeout`` at ``seconds``, then every
    ``TRUSTED_REPEAT_S`` until the body ends."""
    global _armed
    previous = signal.signal(signal.SIGALRM, _expire)
    _armed = True
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3), TRUSTED_REPEAT_S)
    try:
        yield
    finally:
        _armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
