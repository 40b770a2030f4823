"""A client that hangs up takes its work with it: its items waiting at the gate leave the
queue, its running item stops, and the next caller is served in its place.

One container and a request budget of 15 s. H holds the container with a program that
sleeps 50 s; Q's three items wait behind it. Q hangs up: its items leave the queue at once
(they used to wait for H and then run for nobody). H hangs up: its program stops, so R's
correct item runs and scores 1 (had H's program run on, R would have been shut out past its
budget: null). Read from the server's own counters and verdicts, not the clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from reward_server.testing import A, B, C, ServerProcess, as_caller, one_container_server
from tests.helpers.items import ADD, SLEEPER
from tests.helpers.metrics import metric, until, waiting


@pytest.fixture(scope="module")
def one_container(docker_ready: None, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_REQUEST_BUDGET_S": "15", "REWARD_SERVER_SANDBOX_MAX_TIME_LIMIT_S": "60"}
    with one_container_server(tmp_path_factory.mktemp("hang-up"), env) as srv:
        yield srv


def dropped(url: str) -> float:
    return metric(url, "reward_requests_dropped_total")


def sent(url: str, caller: str, items: list[dict]) -> asyncio.Task:
    """POST as ``caller`` (``as_caller``); cancelling the task hangs up."""
    async def post() -> httpx.Response:
        async with httpx.AsyncClient(headers=as_caller(caller), timeout=300) as client:
            return await client.post(url + "/v1/verify/code", json={"items": items})
    return asyncio.ensure_future(post())


async def hang_up(task: asyncio.Task) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_a_client_that_hangs_up_leaves_the_queue_and_frees_its_container(
        one_container: ServerProcess) -> None:
    url = one_container.url

    async def scenario() -> dict:
        before = dropped(url)
        granted = metric(url, r'reward_queue_wait_seconds_count\{verifier="code"\}')
        h = sent(url, A, [SLEEPER])
        await until(lambda: metric(url, r'reward_queue_wait_seconds_count\{verifier="code"\}')
                    > granted, "H holds the container")
        q = sent(url, B, [ADD, ADD, ADD])
        await until(lambda: waiting(url) == 3, "Q's three items wait")
        await hang_up(q)
        await until(lambda: waiting(url) == 0 and dropped(url) == before + 1,
                    "Q's items left the queue while H still runs")
        assert not h.done()  # H's program still sleeps: the queue emptied for Q's going
        await hang_up(h)
        await until(lambda: dropped(url) == before + 2, "H's request dropped")
        r = await sent(url, C, [ADD])
        return r.json()["results"][0]

    result = asyncio.run(scenario())
    assert (result["score"], result["status"]) == (1.0, "ok"), result
    assert metric(url, r'reward_requests_total\{code="499",route="/v1/verify/code"\}') == 2
