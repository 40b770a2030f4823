"""Hostile math items come back as timeout/parse_error in bounded time, the server keeps
answering /healthz while they run (its event loop never spends their CPU), and killed workers
are replaced."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ServerProcess, run_server
from tests.helpers.cpu import server_cpu_s

TIMEOUT_S = 2.0

HOSTILE = [
    ("\\boxed{5^{5^{5^5}}}", "3"),
    ("\\boxed{10!!!!!!!!}", "3"),
    ("\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}", "1"),
    ("\\boxed{" + "(" * 10_000 + "1" + ")" * 10_000 + "}", "1"),
    ("\\boxed{" + "x" * (1024 * 1024) + "}", "3"),
    ("\\boxed{" + "1+" * 600_000 + "1}", "2"),
    ("\\boxed{9^{9^{9^{9}}} - 9^{9^{9^{9}}}}", "0"),
    ("\\boxed{1e99999999}", "1"),
    ("\\boxed{10^{10^{10}} + 1}", "1"),  # a 4 GB integer: the memory cap or the timeout
]


@pytest.fixture(scope="module")
def fast_timeout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_MATH_TIMEOUT_S": str(TIMEOUT_S), "REWARD_SERVER_CACHE_SIZE": "0"}
    with run_server(tmp_path_factory.mktemp("hostile"), env=env) as srv:
        yield srv


def test_hostile_items_are_bounded_and_server_stays_live(fast_timeout: ServerProcess) -> None:
    items = [{"response": r, "answer": a} for r, a in HOSTILE]
    # honest items in the same batch, one of them a 1 MB completion
    items += [{"response": "\\boxed{4}", "answer": "4"},
              {"response": "x" * (1024 * 1024) + "\\boxed{2}", "answer": "2"}]
    out: dict[str, Any] = {}

    def post() -> None:
        with fast_timeout.client() as c:  # its 60 s timeout: the outer deadline of a hang
            out["response"] = c.post("/v1/verify/math", json={"items": items})

    cpu_before = server_cpu_s(fast_timeout)
    worker = threading.Thread(target=post)
    worker.start()
    health = 0
    with fast_timeout.client() as c:
        while worker.is_alive():
            assert c.get("/healthz").status_code == 200
            health += 1
            time.sleep(0.05)
    worker.join()
    cpu_s = server_cpu_s(fast_timeout) - cpu_before
    print(f"server process CPU {cpu_s:.2f} s over the batch, {health} health checks")

    assert out["response"].status_code == 200
    results = out["response"].json()["results"]
    for (response, _), result in zip(HOSTILE, results, strict=False):
        assert result["status"] in {"timeout", "parse_error"}, (response[:40], result)
        assert result["correct"] is False
    assert results[-2]["correct"] is True and results[-1]["correct"] is True
    # /healthz answered throughout, and the hostile items cost the server process (its
    # event loop) less CPU than one of them may in a worker: none was parsed on the loop
    assert health >= 5
    assert cpu_s < TIMEOUT_S, cpu_s


def test_workers_are_replaced_after_timeouts(fast_timeout: ServerProcess) -> None:
    with fast_timeout.client() as c:
        for _ in range(2):  # each round kills both workers
            items = [{"response": "\\boxed{5^{5^{5^5}}}", "answer": "3"}] * 2
            results = c.post("/v1/verify/math", json={"items": items}).json()["results"]
            assert [r["status"] for r in results] == ["timeout", "timeout"]
            assert "exceeded" in results[0]["detail"]  # stopped in its worker, or killed
        items = [{"response": f"\\boxed{{\\frac{{{i}}}{{2}}}}", "answer": str(i / 2)}
                 for i in range(20)]
        results = c.post("/v1/verify/math", json={"items": items}).json()["results"]
        assert all(r["correct"] for r in results)
        assert "reward_timeouts_total{verifier=\"math\"}" in c.get("/metrics").text


def test_over_long_answer_is_parse_error_without_a_worker(http: httpx.Client) -> None:
    items = [{"response": "\\boxed{" + "1" * 5000 + "}", "answer": "1"}]
    result = http.post("/v1/verify/math", json={"items": items}).json()["results"][0]
    assert result["status"] == "parse_error"
    assert "longer than 2000 characters" in result["detail"]


BROKEN_PLUGIN = '''
from reward_server.verifiers import ItemBase, ResultBase, Verifier


class Item(ItemBase):
    response: str


class BrokenVerifier(Verifier):
    name = "broken"
    item_model = Item
    result_model = ResultBase
    description = "Raises: stands for a bug that lets an exception escape."

    async def verify(self, items):
        raise RuntimeError("a bug")
'''


def test_an_escaped_exception_is_a_json_500_with_a_request_id(tmp_path: Path) -> None:
    """Nothing an item holds should raise; if a bug does, the client gets JSON it
    can log, with an id that finds the traceback in the server log, not a bare text 500."""
    (tmp_path / "broken_plugin.py").write_text(BROKEN_PLUGIN)
    env = {"PYTHONPATH": str(tmp_path), "REWARD_SERVER_PLUGINS": '["broken_plugin:BrokenVerifier"]'}
    with run_server(tmp_path, env=env) as srv, srv.client() as c:
        r = c.post("/v1/rewards", json={"items": [
            {"verifier": "math", "response": "\\boxed{4}", "answer": "4"},
            {"verifier": "broken", "response": "x"}]})
        assert r.status_code == 500
        body = r.json()
        assert body["request_id"] == r.headers["x-request-id"]
        assert body["request_id"] in body["detail"]
        assert c.get("/healthz").status_code == 200  # and the server carries on
        time.sleep(0.5)
        log = srv.log.read_text()
    assert body["request_id"] in log and "RuntimeError: a bug" in log
