"""reward_server.client: batching and errors against the real server; the retry policy with
a scripted transport (the one edge we cannot make a real server produce on demand)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from reward_server.client import (
    AsyncRewardClient,
    RewardClient,
    RewardRequestError,
    RewardServerUnavailable,
)
from tests.conftest import BUILT_IN_VERIFIERS, KNOWN_VERIFIERS, ServerProcess, free_port, run_server
from tests.helpers.items import boxed

ITEMS, EXPECTED = boxed(10, 3)


def test_sync_batches_and_keeps_order(server: ServerProcess) -> None:
    with RewardClient(server.url, batch_size=3) as client:
        out = client.rewards(ITEMS)
        assert out.rewards == EXPECTED
        assert len(out.results) == 10
        results = client.verify("math", [{k: v for k, v in i.items() if k != "verifier"}
                                         for i in ITEMS])
        assert [r["score"] for r in results] == EXPECTED
        assert client.health()["status"] == "ok"
        assert [v["name"] for v in client.verifiers()] == BUILT_IN_VERIFIERS


async def test_async_batches_concurrently(server: ServerProcess) -> None:
    async with AsyncRewardClient(server.url, batch_size=4, max_concurrency=2) as client:
        out, results = await asyncio.gather(
            client.rewards(ITEMS),
            client.verify("math", [{"response": "\\boxed{1}", "answer": "1"}] * 9),
        )
    assert out.rewards == EXPECTED
    assert [r["score"] for r in results] == [1.0] * 9


def test_client_errors_carry_the_server_message(server: ServerProcess) -> None:
    with RewardClient(server.url, on_invalid="error") as client, \
            pytest.raises(RewardRequestError) as err:
        client.rewards([{"verifier": "nope"}])
    assert err.value.status_code == 404
    assert KNOWN_VERIFIERS in str(err.value)


def test_a_lone_surrogate_in_a_completion_is_sent_and_scored(server: ServerProcess) -> None:
    """httpx writes json= as UTF-8, which a lone surrogate cannot be encoded to: the whole
    call raised. Sent as escaped ASCII, that item is scored and so is its batch."""
    items = [{"verifier": "math", "response": "\ud800 so \\boxed{1}", "answer": "1"},
             ITEMS[0]]
    with RewardClient(server.url) as client:
        out = client.rewards(items)
    assert len(out.rewards) == 2 and out.rewards[1] == 1.0
    assert out.results[0]["status"] in ("ok", "no_answer", "parse_error")


@pytest.fixture(scope="module")
def small_body(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("small_body"),
                    env={"REWARD_SERVER_MAX_BODY_BYTES": "3000"}) as srv:
        yield srv


def test_a_chunk_over_the_body_limit_is_halved_until_it_fits(small_body: ServerProcess
                                                             ) -> None:
    items = [{"verifier": "math", "response": f"{'.' * 600} \\boxed{{{i}}}",
              "answer": str(i)} for i in range(8)]  # ~5 KB in one chunk, ~700 B each
    with RewardClient(small_body.url) as client:
        assert client.rewards(items).rewards == [1.0] * 8

    async def run() -> list[float | None]:
        async with AsyncRewardClient(small_body.url) as client:
            return (await client.rewards(items)).rewards

    assert asyncio.run(run()) == [1.0] * 8
    too_big = [{"verifier": "math", "response": "." * 4000, "answer": "1"}]
    with RewardClient(small_body.url) as client, pytest.raises(RewardRequestError,
                                                                match="413"):
        client.rewards(too_big)  # one item over the limit: nothing left to halve


def test_unreachable_server_fails_clearly_after_n_attempts() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with RewardClient(url, max_attempts=3, backoff_s=0.05) as client:
        with pytest.raises(RewardServerUnavailable, match="after 3 attempts: ConnectError"):
            client.rewards(ITEMS[:1])
    # refused at once, two 0.05 s backoffs between: not three connect timeouts (10 s each);
    # a bound that catches that hang only, not a speed goal (load slows the rest)
    assert time.monotonic() - started < 30


class Script:
    """Answers each request with the next scripted status code and counts the calls."""

    def __init__(self, *codes: int) -> None:
        self.codes = list(codes)
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        code = self.codes.pop(0)
        if code == 200:
            return httpx.Response(200, json={"rewards": [1.0], "results": [{"score": 1.0}]})
        return httpx.Response(code, json={"detail": f"scripted {code}"})


@pytest.mark.parametrize("code", [429, 500, 502, 503])
def test_retries_transient_errors(code: int) -> None:
    script = Script(code, code, 200)
    with RewardClient("http://rs", transport=httpx.MockTransport(script), backoff_s=0.01) as c:
        assert c.rewards(ITEMS[:1]).rewards == [1.0]
    assert script.calls == 3


@pytest.mark.parametrize("code", [400, 401, 404, 413, 422])
def test_does_not_retry_client_errors(code: int) -> None:
    script = Script(code, 200)
    with RewardClient("http://rs", transport=httpx.MockTransport(script), backoff_s=0.01) as c:
        with pytest.raises(RewardRequestError, match=f"scripted {code}"):
            c.rewards(ITEMS[:1])
    assert script.calls == 1


def test_gives_up_after_max_attempts_never_returns_zero() -> None:
    script = Script(*[503] * 4)
    with RewardClient("http://rs", transport=httpx.MockTransport(script), max_attempts=4,
                      backoff_s=0.01) as c:
        with pytest.raises(RewardServerUnavailable, match="after 4 attempts"):
            c.rewards(ITEMS[:1])
    assert script.calls == 4


async def test_async_retries_transient_errors() -> None:
    script = Script(503, 200)
    async with AsyncRewardClient("http://rs", transport=httpx.MockTransport(script),
                                 backoff_s=0.01) as c:
        assert (await c.rewards(ITEMS[:1])).rewards == [1.0]
    assert script.calls == 2


def test_client_needs_no_server_dependencies() -> None:
    import subprocess
    import sys

    code = ("import sys; import reward_server.client; "
            "bad = {'fastapi', 'sympy', 'pebble', 'uvicorn'} & set(sys.modules); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


class TooBusyThenOk:
    """A 429 with ``Retry-After`` the first time, then 200; records when each call came."""

    def __init__(self, retry_after: str) -> None:
        self.retry_after = retry_after
        self.times: list[float] = []
        self.hosts: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.times.append(time.monotonic())
        self.hosts.append(request.url.host)
        if len(self.times) == 1:
            return httpx.Response(429, json={"detail": "over max_requests_per_caller"},
                                  headers={"Retry-After": self.retry_after})
        return httpx.Response(200, json={"rewards": [1.0], "results": [{"score": 1.0}]})


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_429_is_retried_after_its_retry_after(asynchronous: bool) -> None:
    """The server's Retry-After (its queue's drain rate) is waited, not the 10 ms backoff:
    a client that came straight back would only be refused again. (A lower bound on a
    sleep holds on any machine.)"""
    script = TooBusyThenOk("1")
    kwargs = {"transport": httpx.MockTransport(script), "backoff_s": 0.01}
    if asynchronous:
        async def call() -> list[float | None]:
            async with AsyncRewardClient("http://rs", **kwargs) as c:  # type: ignore[arg-type]
                return (await c.rewards(ITEMS[:1])).rewards
        rewards = asyncio.run(call())
    else:
        with RewardClient("http://rs", **kwargs) as c:  # type: ignore[arg-type]
            rewards = c.rewards(ITEMS[:1]).rewards
    assert rewards == [1.0]
    assert script.times[1] - script.times[0] >= 1.0


def test_a_429_sets_its_server_aside_for_its_retry_after() -> None:
    """With two servers, a chunk refused by one goes to the other at once, and later chunks
    keep away from the busy one for as long as it said (longer than the cooldown)."""
    script = TooBusyThenOk("30")
    with RewardClient(["http://a", "http://b"], transport=httpx.MockTransport(script),
                      cooldown_s=0.01, batch_size=1) as c:
        assert c.rewards(ITEMS[:1]).rewards == [1.0]
        first = script.hosts[0]
        time.sleep(0.05)  # past the cooldown: only the Retry-After keeps it aside
        for _ in range(4):
            assert c.rewards(ITEMS[:1]).rewards == [1.0]
    assert script.hosts[1:] == [{"a": "b", "b": "a"}[first]] * 5


@pytest.mark.parametrize(("header", "expected"), [("3", 3.0), ("0", 0.0), ("-4", 0.0),
                                                  ("soon", None), ("inf", None), ("", None)])
def test_retry_after_is_read_as_seconds(header: str, expected: float | None) -> None:
    from reward_server.retry_after import retry_after_s

    response = httpx.Response(429, headers={"Retry-After": header} if header else {})
    assert retry_after_s(response) == expected


def test_retry_after_may_be_an_http_date() -> None:
    import email.utils

    from reward_server.retry_after import retry_after_s

    date = email.utils.formatdate(time.time() + 120, usegmt=True)
    seconds = retry_after_s(httpx.Response(503, headers={"Retry-After": date}))
    assert seconds is not None and 100 < seconds <= 121
