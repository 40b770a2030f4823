"""A server asked to stop (SIGTERM) with a thousand requests queued stops within its drain
deadline: the queued items never run (each request is answered 503 with Retry-After, so a
client sends it to another replica), the item running past the deadline is cancelled, and
the process exits. Before, uvicorn waited for every request without a deadline: the running
program, then each queued item in turn, for clients long gone ("waiting for background tasks"
90 s later in the issue's measurement).

One container; H holds it with a program that sleeps 50 s; 1,000 one-item requests from four
callers wait behind it. Read from the answers and the exit, not the clock (the bound on the
wait for the exit only keeps a hang from hanging the suite).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator

import httpx
import pytest

from reward_server.testing import ServerProcess, one_container_server
from tests.helpers.items import ADD, SLEEPER
from tests.helpers.metrics import metric, until, waiting

QUEUED = 1000
DRAIN_S = 3


@pytest.fixture
def one_container(docker_ready: None, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_REQUEST_BUDGET_S": "0", "REWARD_SERVER_SANDBOX_MAX_TIME_LIMIT_S": "60",
           "REWARD_SERVER_DRAIN_S": str(DRAIN_S)}
    with one_container_server(tmp_path_factory.mktemp("drain"), env) as srv:
        yield srv


def test_a_stopping_server_drains_within_its_deadline(one_container: ServerProcess) -> None:
    url, proc = one_container.url, one_container.proc
    code = r'reward_queue_wait_seconds_count\{verifier="code"\}'

    async def scenario() -> tuple[list, object]:
        limits = httpx.Limits(max_connections=QUEUED + 10, max_keepalive_connections=0)
        clients = [httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(
            local_address=f"127.0.0.{2 + k}", limits=limits), timeout=300) for k in range(4)]
        holder = httpx.AsyncClient(timeout=300)
        try:
            granted = metric(url, code)
            h = asyncio.ensure_future(holder.post(url + "/v1/verify/code",
                                                  json={"items": [SLEEPER]}))
            await until(lambda: metric(url, code) > granted, "H holds the container")
            queued = [asyncio.ensure_future(clients[k % 4].post(
                url + "/v1/verify/code", json={"items": [ADD]})) for k in range(QUEUED)]
            await until(lambda: waiting(url) == QUEUED, "every request waits", within_s=120)
            proc.send_signal(signal.SIGTERM)
            answers = await asyncio.gather(*queued, return_exceptions=True)
            held = (await asyncio.gather(h, return_exceptions=True))[0]
            return answers, held
        finally:
            for client in (*clients, holder):
                await client.aclose()

    answers, held = asyncio.run(scenario())
    # uvicorn, its shutdown done, raises the signal again under its default action
    assert proc.wait(timeout=120) == -signal.SIGTERM
    statuses = [a.status_code if isinstance(a, httpx.Response) else type(a).__name__
                for a in answers]
    assert statuses == [503] * QUEUED, sorted(set(statuses))
    first = answers[0]
    assert first.headers["retry-after"] == "1" and "stopping" in first.json()["detail"]
    # the program running at the deadline was cut: no verdict for it
    assert not (isinstance(held, httpx.Response) and held.status_code == 200), held
