"""The clock that stops an assertion job's trusted code (``harness/turns.py``): the test
code's own loops, even one that swallows the first stop."""

from __future__ import annotations

import time

import pytest

from sandbox.harness import turns


def test_the_trusted_clock_stops_a_loop_even_one_that_swallows_the_first_stop() -> None:
    started = time.process_time()
    stops = 0
    with pytest.raises(turns.TrustedTimeout), turns.trusted_clock(0.2):
        while True:
            try:
                while True:
                    pass
            except turns.TrustedTimeout:
                stops += 1
                if stops == 3:
                    raise
    assert stops == 3 and time.process_time() - started < 5
    time.sleep(0.3)  # disarmed: nothing more is raised
