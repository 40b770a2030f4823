"""The item's wall-clock budget and its turns, and the verdicts of tests that did not run one by
one: the ones an execution never reached, and the ones that failed together (the solution did
not load, its container died). The host writes those it decides from outside here too, so a
test that did not run reads the same whoever reports it."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager

from .statuses import OK, SKIPPED, TIMEOUT


def time_left(job):
    """This test's time limit: the per-test limit, or what is left of the item's budget or
    of its turn (``turn_end``: an assertion job's, see ``turns``)."""
    now = time.monotonic()
    return min(job["time_limit_s"], job["deadline"] - now, job.get("turn_end", math.inf) - now)


def turn_over(job, ran):
    """Between tests, once the job's turn (``yield_after_s``) has passed: the harness answers
    with the tests it ran and ``yielded``, and the host runs the rest in a later turn (in
    this container when no other item waits), so an item of many slow tests holds a
    container for about one test's limit at a time while other items wait, not for its whole
    budget. Not once the item's budget is spent: its remaining tests are over budget now."""
    now = time.monotonic()
    return (ran > 0 and job.get("yield_at") is not None and now >= job["yield_at"]
            and now < job["deadline"])


def build_turn_over(job):
    """After a compile whose result a later turn has without compiling again (the program's
    build shipped to the host, the checker kept in this container), once the job's turn has
    passed: the turn ends there, so a compile never adds to the longest span a container is
    held without a break (a checker's compile, the program's, then a test and its check held
    one for 100 s in one turn, past another caller's budget)."""
    now = time.monotonic()
    return job.get("yield_at") is not None and job["yield_at"] <= now < job["deadline"]


@contextmanager
def restarted_clock(job):
    """The item's clock stopped for the body: its deadline and start move on by the time
    the body took. Its turn does not: the container was held all the while, so a turn
    that a setup (a checker compiled again) outlasted ends as soon as it may."""
    started, deadline = time.monotonic(), job["deadline"]
    job["deadline"] = math.inf
    try:
        yield
    finally:
        took = time.monotonic() - started
        job["deadline"] = deadline + took
        job["started"] += took


def momentary(job):
    """Mark the execution's verdict as one the machine or the moment decided (a wall-clock
    limit that load can make a program or a compiler miss, a full disk), not the item: the
    reply says ``momentary``, and the server never caches it for other callers."""
    job["momentary"] = True


def yielded(job, results):
    return {"status": OK, "tests": results, "yielded": True,
            "elapsed_s": time.monotonic() - job["started"]}


def every_test(count, status, message, time_ms=0.0):
    """``count`` tests with one verdict and one message."""
    return [{"status": status, "time_ms": time_ms, "stderr": message} for _ in range(count)]


def failed_all(count, status, message, time_ms=0.0):
    """An execution whose ``count`` tests all failed alike: a verdict about the program."""
    return {"status": OK, "tests": every_test(count, status, message, time_ms)}


def over_budget(job, count):
    message = f"not run: the item's wall-clock budget of {job['budget_s']:g} s was spent"
    return every_test(count, TIMEOUT, message)


def skipped(count):
    """Tests after the first failure of an all-or-nothing item: the score is 0 already."""
    return every_test(count, SKIPPED, "not run: an earlier test failed and the item is "
                      "all-or-nothing")
