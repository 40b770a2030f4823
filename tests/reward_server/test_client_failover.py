"""Several reward servers behind one client: batches spread over them, a dead or dying
server's chunks fail over to the others, and each item lands in the result exactly once."""

from __future__ import annotations

import collections
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from reward_server.client import (
    AsyncRewardClient,
    Endpoints,
    RewardClient,
    RewardServerUnavailable,
)
from tests.conftest import ServerProcess, free_port, run_server
from tests.helpers.items import boxed

ITEMS, EXPECTED = boxed(60, 7)


class Counting(httpx.HTTPTransport):
    """The real transport, counting requests per host:port (to see where chunks went)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.sent[f"{request.url.host}:{request.url.port}"] += 1
        return super().handle_request(request)


def test_endpoints_rotate_and_skip_a_failed_server() -> None:
    ends = Endpoints(["http://a", "http://b", "http://c/"], cooldown_s=60)
    assert ends.urls == ["http://a", "http://b", "http://c"]
    assert [ends.pick(set()) for _ in range(4)] == ["http://a", "http://b", "http://c",
                                                    "http://a"]
    ends.failed("http://b")
    assert {ends.pick(set()) for _ in range(6)} == {"http://a", "http://c"}
    assert ends.pick({"http://a", "http://c"}) == "http://b"  # all tried: the failed one too
    ends.succeeded("http://b")
    assert "http://b" in {ends.pick(set()) for _ in range(3)}
    with pytest.raises(ValueError, match="at least one"):
        Endpoints([])
    with pytest.raises(ValueError, match="retrying forever"):
        RewardClient("http://a", max_attempts=None, retry_for_s=None)


def test_one_batch_is_spread_over_every_server(server: ServerProcess) -> None:
    port = server.url.rsplit(":", 1)[1]
    urls = [server.url, f"http://localhost:{port}"]  # two names for one server
    transport = Counting()
    with RewardClient(urls, batch_size=100, transport=transport) as client:
        assert client.rewards(ITEMS).rewards == EXPECTED
    assert transport.sent == {f"127.0.0.1:{port}": 1, f"localhost:{port}": 1}


BACKOFF_S = 120.0


def test_dead_server_fails_over_at_once_and_counts_each_item_once(
        server: ServerProcess) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    transport = Counting()
    started = time.monotonic()
    # a round of backoff would wait BACKOFF_S at least: far longer than the batch takes even
    # on a loaded machine, so the bound below tells "never waited" from "waited once"
    with RewardClient([dead, server.url], batch_size=6, backoff_s=BACKOFF_S,
                      max_backoff_s=BACKOFF_S, cooldown_s=60, transport=transport) as client:
        out = client.rewards(ITEMS)
    assert out.rewards == EXPECTED
    assert [r["score"] for r in out.results] == EXPECTED
    # no backoff was waited, and the dead server was set aside after failing
    assert time.monotonic() - started < BACKOFF_S / 2
    live = server.url.removeprefix("http://")
    assert transport.sent[live] == 10
    assert 1 <= transport.sent[dead.removeprefix("http://")] <= 8


async def test_async_client_fails_over(server: ServerProcess) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with AsyncRewardClient([dead, server.url], batch_size=7, backoff_s=5.0) as client:
        assert (await client.rewards(ITEMS)).rewards == EXPECTED


def test_server_killed_mid_batch_loses_nothing_and_doubles_nothing(
        server: ServerProcess, tmp_path: Path) -> None:
    """A SIGKILLed server's in-flight chunks are sent again to the survivor; the result has
    every item once, in order, with the right score."""
    n = 3000
    items = [{"verifier": "math", "response": f"\\boxed{{\\frac{{{i}}}{{{i + 1}}}}}",
              "answer": f"{i}/{i + 1}" if i % 2 else "-1"} for i in range(n)]
    expected = [1.0 if i % 2 else 0.0 for i in range(n)]
    with run_server(tmp_path) as victim:
        killer = threading.Timer(0.5, victim.proc.send_signal, [signal.SIGKILL])
        transport = Counting()
        with RewardClient([victim.url, server.url], batch_size=50, max_concurrency=4,
                          backoff_s=0.1, transport=transport) as client:
            killer.start()
            out = client.rewards(items)
        killer.join()
        assert victim.proc.wait(timeout=10) == -signal.SIGKILL
    assert out.rewards == expected
    assert len(out.results) == n
    victim_sent = transport.sent[victim.url.removeprefix("http://")]
    assert victim_sent >= 1  # it did take part before it died
    assert sum(transport.sent.values()) >= n // 50  # and nothing was skipped


def test_every_server_down_waits_then_fails_clearly() -> None:
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    with RewardClient(urls, max_attempts=4, backoff_s=0.05) as client:
        with pytest.raises(RewardServerUnavailable, match="after 4 attempts") as err:
            client.rewards(ITEMS[:1])
    assert all(u in str(err.value) for u in urls)


def test_retry_for_s_keeps_trying_until_a_server_comes_back(tmp_path: Path) -> None:
    """A restart in the middle of a call: the call waits for it instead of failing."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    result: dict[str, object] = {}

    def score() -> None:
        with RewardClient(url, max_attempts=None, retry_for_s=120, backoff_s=0.2,
                          max_backoff_s=1.0) as client:
            result["out"] = client.rewards(ITEMS[:5]).rewards

    caller = threading.Thread(target=score)
    caller.start()
    time.sleep(2.0)  # the call is retrying against nothing
    assert caller.is_alive()
    with run_server(tmp_path, args=[], startup_s=60, port=port):
        caller.join(timeout=60)
    assert result["out"] == EXPECTED[:5]
