"""A job that occurs several times in one request runs once, with the cache off too.

A GRPO group repeats answers (the same right answer, the same wrong ones, verbatim copies);
each copy must get the verdict it gets alone, and the pool must see each job once. The real
server (its own process: a worker pool forked from a pytest process that has run torch and
TRL elsewhere in the suite would inherit their threads), the pool's tasks counted by its
gate's metric (one observation per task handed to a worker)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reward_server.settings import Settings
from reward_server.verifiers.math import MathItem, MathVerifier, PoolJob
from tests.conftest import run_server

ROOT = {"response": "So $\\boxed{2\\sqrt{2}}$.", "answer": "\\sqrt{8}"}
WRONG = {"response": "The final answer is $\\sqrt{3}$.", "answer": "\\sqrt{8}"}
NUMBER = {"response": "\\boxed{3}", "answer": "3"}  # the fast path: no worker


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    # one worker, no cache; a generous timeout, so a cold worker on a loaded machine is not
    # replaced mid-count
    env = {"REWARD_SERVER_CACHE_SIZE": "0", "REWARD_SERVER_MATH_WORKERS": "1",
           "REWARD_SERVER_MATH_TIMEOUT_S": "60"}
    with run_server(Path(tmp_path_factory.mktemp("dedup")), env=env) as server:
        with httpx.Client(base_url=server.url, timeout=300) as client:
            yield client


def _tasks_run(http: httpx.Client) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith('reward_queue_wait_seconds_count{verifier="math"}'):
            return float(line.split()[-1])
    return 0.0


def _verify(http: httpx.Client, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = http.post("/v1/verify/math", json={"items": items})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def test_the_items_need_a_worker_or_not() -> None:
    verifier = MathVerifier(Settings())
    assert isinstance(verifier.triage(MathItem(**ROOT)), PoolJob)
    assert isinstance(verifier.triage(MathItem(**WRONG)), PoolJob)
    assert not isinstance(verifier.triage(MathItem(**NUMBER)), PoolJob)


def test_a_jobs_cache_key_is_made_where_it_is_triaged() -> None:
    """Triage runs on a thread for a large request; the key's digest costs what the texts
    weigh (a reference of megabytes), so it is made there, not on the loop in run_job."""
    job = MathVerifier(Settings()).triage(MathItem(**ROOT))
    assert isinstance(job, PoolJob) and "key" in vars(job)


def test_copies_in_one_request_run_once_and_get_their_own_verdict(http: httpx.Client) -> None:
    alone = [_verify(http, [item])[0] for item in (ROOT, WRONG, NUMBER)]
    assert [r["correct"] for r in alone] == [True, False, True], alone
    before = _tasks_run(http)
    results = _verify(http, [ROOT, WRONG, NUMBER] * 6)
    assert _tasks_run(http) - before == 2  # two distinct jobs; the number needs no worker
    assert results == alone * 6


def test_another_tolerance_is_another_job(http: httpx.Client) -> None:
    item = {"response": "\\boxed{3.1416}", "answer": "\\pi"}
    before = _tasks_run(http)
    strict, lenient = _verify(http, [item, {**item, "tolerance": 1e-4}])
    assert _tasks_run(http) - before == 2
    assert (strict["correct"], lenient["correct"]) == (False, True)
