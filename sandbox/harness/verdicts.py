"""The item's wall-clock budget and its turns, and the results of the tests an execution did
not run."""

from __future__ import annotations

import time

from .statuses import OK, SKIPPED, TIMEOUT


def time_left(job):
    """This test's time limit: the per-test limit, or what is left of the item's budget."""
    return min(job["time_limit_s"], job["deadline"] - time.monotonic())


def turn_over(job, ran):
    """Between tests, once the job's turn (``yield_after_s``) has passed: the harness answers
    with the tests it ran and ``yielded``, and the host runs the rest in a later turn, so an
    item of many slow tests holds a container for about one test's limit at a time while
    other items wait, not for its whole budget."""
    return ran > 0 and job.get("yield_at") is not None and time.monotonic() >= job["yield_at"]


def yielded(job, results):
    return {"status": OK, "tests": results, "yielded": True,
            "elapsed_s": time.monotonic() - job["started"]}


def over_budget(job, count):
    message = f"not run: the item's wall-clock budget of {job['budget_s']:g} s was spent"
    return [{"status": TIMEOUT, "time_ms": 0.0, "stderr": message} for _ in range(count)]


def skipped(count):
    """Tests after the first failure of an all-or-nothing item: the score is 0 already."""
    message = "not run: an earlier test failed and the item is all-or-nothing"
    return [{"status": SKIPPED, "time_ms": 0.0, "stderr": message} for _ in range(count)]
