"""A job that occurs several times in one request runs once, with the cache off too.

A GRPO group repeats answers (the same right answer, the same wrong ones, verbatim copies);
each copy must get the verdict it gets alone, and the pool must see each job once. Real
verifier, real worker pool, in this process; the pool's tasks are counted by its gate's
metric (one observation per task handed to a worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from reward_server.settings import Settings
from reward_server.verifiers.math import MathItem, MathResult, MathVerifier, PoolJob


def _tasks_run() -> float:
    return REGISTRY.get_sample_value("reward_queue_wait_seconds_count",
                                     {"verifier": "math"}) or 0.0


@pytest.fixture(scope="module")
async def verifier() -> AsyncIterator[MathVerifier]:
    # a generous timeout: on a loaded machine a cold worker's first parse took over 3 s, a
    # timeout replaced the worker, and the counts below measured the replacement too
    v = MathVerifier(Settings(cache_size=0, math_workers=1, math_timeout_s=60))
    await v.start()
    yield v
    await v.stop()


ROOT = MathItem(response="So $\\boxed{2\\sqrt{2}}$.", answer="\\sqrt{8}")
WRONG = MathItem(response="The final answer is $\\sqrt{3}$.", answer="\\sqrt{8}")
NUMBER = MathItem(response="\\boxed{3}", answer="3")  # the fast path: no worker


async def test_copies_in_one_request_run_once_and_get_their_own_verdict(
        verifier: MathVerifier) -> None:
    assert isinstance(verifier.triage(ROOT), PoolJob)
    assert isinstance(verifier.triage(WRONG), PoolJob)
    alone = [(await verifier.verify([item]))[0] for item in (ROOT, WRONG, NUMBER)]
    assert [r.correct for r in alone] == [True, False, True]

    batch = [ROOT, WRONG, NUMBER] * 6
    before = _tasks_run()
    results = await verifier.verify(batch)
    assert _tasks_run() - before == 2  # two distinct jobs; the number needs no worker
    assert results == alone * 6
    assert all(isinstance(r, MathResult) for r in results)


async def test_another_tolerance_is_another_job(verifier: MathVerifier) -> None:
    item = MathItem(response="\\boxed{3.1416}", answer="\\pi")
    loose = item.model_copy(update={"tolerance": 1e-4})
    before = _tasks_run()
    strict, lenient = await verifier.verify([item, loose])
    assert _tasks_run() - before == 2
    assert (strict.correct, lenient.correct) == (False, True)
