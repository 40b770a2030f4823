"""One slow batch never stalls everyone else's rewards, on a real server.

Client A posts a batch of distinct items that each run into the time limit; a second later
client B posts an honest batch. First come, first served, B waited for A's whole batch
(74.5 s for 40 math items at 3 s on two workers). Now B waits for at most about one of A's
items; every one of A's items runs and scores 0 (its own slowness never buys a null); a
stream of one-item requests cannot starve another caller's batch; copies of one hostile
completion pay for it once. Callers are told apart as a proxy names them (``as_caller``).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reward_server.testing import PROXY_SETTINGS, B, as_caller, one_container_server
from tests.conftest import ServerProcess, run_server, verify_code
from tests.helpers.code import code_server as ready_code_server
from tests.helpers.items import towers

TIMEOUT_S = 2.0  # per math item
BUDGET_S = 20.0  # per request


# Who was answered first is read from the order of the answers, never from the clock: each
# answer takes the next number.
_ANSWERS = itertools.count()


def post_later(url: str, path: str, items: list[dict[str, Any]], delay_s: float,
               out: dict[str, Any], caller: str | None = None) -> threading.Thread:
    """Post as ``caller`` (``as_caller``: another caller to the fair gates); ``out["done"]``
    says when the answer came, in the order of all answers."""
    def post() -> None:
        time.sleep(delay_s)
        with httpx.Client(headers=as_caller(caller), timeout=60) as client:
            out["response"] = client.post(url + path, json={"items": items}, timeout=300)
        out["done"] = next(_ANSWERS)

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def metric(text: str, name: str, verifier: str) -> float:
    match = re.search(rf'^{name}{{verifier="{verifier}"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def granted(url: str, verifier: str) -> float:
    """How many items the verifier's gate has let run (each observes its wait)."""
    return metric(httpx.get(url + "/metrics", timeout=60).text,
                  "reward_queue_wait_seconds_count", verifier)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_MATH_TIMEOUT_S": str(TIMEOUT_S), "REWARD_SERVER_CACHE_SIZE": "0",
           "REWARD_SERVER_MATH_WORKERS": "2", "REWARD_SERVER_REQUEST_BUDGET_S": str(BUDGET_S),
           **PROXY_SETTINGS}
    with run_server(tmp_path_factory.mktemp("fairness"), env=env) as srv:
        # the workers' first start (math-verify's import and warm-up) is not under test
        warm = [{"response": "\\boxed{\\sqrt{8}}", "answer": "2\\sqrt{2}"}] * 2
        assert httpx.post(srv.url + "/v1/verify/math", json={"items": warm},
                          timeout=120).status_code == 200
        yield srv


def test_honest_math_request_is_not_held_behind_a_hostile_batch(server: ServerProcess) -> None:
    hostile = towers(12)  # first come, first served: 12 x (2 s + a restart) / 2 workers
    honest = ([{"response": "\\boxed{3}", "answer": "8"}] * 8  # the fast path: no worker
              + [{"response": f"\\boxed{{\\frac{{\\sqrt{{{k + 2}}}}}{{2}}}}",
                  "answer": f"\\sqrt{{{k + 2}}}/2"} for k in range(8)])  # SymPy: a worker
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    numeric: dict[str, Any] = {}
    threads = [post_later(server.url, "/v1/verify/math", hostile, 0.0, a),
               post_later(server.url, "/v1/verify/math", honest, 1.0, b, B),
               post_later(server.url, "/v1/verify/math", honest[:8], 1.5, numeric)]
    for thread in threads:
        thread.join()

    # cheap items never queue: plain numbers are answered in the server process, before B
    # (which waits for a worker) and A; queued, they would wait in A's place (one caller)
    assert numeric["response"].status_code == 200
    assert numeric["done"] < b["done"] < a["done"], (numeric["done"], b["done"], a["done"])
    # B waits for one of A's items per busy worker (and a killed worker's replacement),
    # not for A's batch (over 40 s): answered before A (the order asserted above)
    assert b["response"].status_code == 200
    assert [r["score"] for r in b["response"].json()["results"]] == [0.0] * 8 + [1.0] * 8

    # every one of A's items ran (its own slow items kept the others waiting: that is not
    # the budget's to cut) and scored 0, in order, each saying why
    assert a["response"].status_code == 200
    results = a["response"].json()["results"]
    assert len(results) == 12 and all(r["status"] == "timeout" for r in results)
    assert all(r["score"] == 0.0 and "exceeded" in (r["detail"] or "") for r in results), results

    text = httpx.get(server.url + "/metrics", timeout=60).text
    assert metric(text, "reward_queue_wait_seconds_count", "math") >= 12 + 8
    assert re.search(r"^reward_requests_in_flight \S+$", text, re.M)
    assert re.search(r'^reward_queue_items_waiting\{verifier="math"\} 0\.0$', text, re.M)


def test_copies_of_one_hostile_completion_pay_once(server: ServerProcess) -> None:
    item = {"response": "\\boxed{9^{8^{7^{9}}}}", "answer": "3"}
    before = granted(server.url, "math")
    first = httpx.post(server.url + "/v1/verify/math", json={"items": [item] * 16},
                       timeout=300).json()["results"]
    assert [r["status"] for r in first] == ["timeout"] * 16
    # one request's copies are one job (the verifier shares it), so it ran once: the gate
    # let one item run, not 16
    assert all("exceeded" in r["detail"] for r in first)
    assert granted(server.url, "math") - before == 1
    # believed at once if it used its limit in CPU time, else at its second timeout (a busy
    # machine can slow a correct item once): from then on copies are not run again
    again = httpx.post(server.url + "/v1/verify/math", json={"items": [item] * 4},
                       timeout=300).json()["results"]
    assert all(r["status"] == "timeout" and r["score"] == 0.0 for r in again)
    before = granted(server.url, "math")
    third = httpx.post(server.url + "/v1/verify/math", json={"items": [item] * 4},
                       timeout=300).json()["results"]
    assert granted(server.url, "math") == before  # answered from memory: none ran
    assert all(r["status"] == "timeout" and r["score"] == 0.0 and "remembered" in r["detail"]
               for r in third)


# --- code: the container pool ---------------------------------------------------------------

SLEEP_LIMIT_S = 2.0  # each hostile program sleeps through its one test's time limit


@pytest.fixture(scope="module")
def code_server(docker_ready: None, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_SANDBOX_POOL_SIZE": "2", "REWARD_SERVER_CACHE_SIZE": "0",
           "REWARD_SERVER_REQUEST_BUDGET_S": str(BUDGET_S)}
    with ready_code_server(tmp_path_factory.mktemp("fairness-code"),
                           env={**env, **PROXY_SETTINGS}) as srv:
        yield srv


def test_honest_code_request_is_not_held_behind_a_hostile_batch(
        code_server: ServerProcess) -> None:
    # first come, first served: 10 x 2 s / 2 containers, plus a new container after each
    hostile = [{"response": f"```python\nimport time  # {k}\ntime.sleep(60)\n```",
                "tests": [{"input": "", "output": "done"}], "time_limit_s": SLEEP_LIMIT_S}
               for k in range(10)]
    honest = [{"response": "```python\nprint(int(input()) * 2)\n```",
               "tests": [{"input": str(k), "output": str(2 * k)}]} for k in range(4)]
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    threads = [post_later(code_server.url, "/v1/verify/code", hostile, 0.0, a),
               post_later(code_server.url, "/v1/verify/code", honest, 1.0, b, B)]
    for thread in threads:
        thread.join()

    assert b["response"].status_code == 200
    assert [r["score"] for r in b["response"].json()["results"]] == [1.0] * 4
    # one sleeping program per container, and a fresh container for the one it spoiled:
    # B is answered before A's batch, not after it
    assert b["done"] < a["done"], (b["done"], a["done"])

    # all of A's sleepers ran and scored 0: none was cut to a null by its own siblings
    assert a["response"].status_code == 200
    results = a["response"].json()["results"]
    assert len(results) == 10
    assert all(r["status"] == "ok" and r["score"] == 0.0 and r["tests"][0]["status"] == "timeout"
               for r in results), [(r["status"], r["score"]) for r in results]
    text = httpx.get(code_server.url + "/metrics", timeout=60).text
    assert metric(text, "reward_queue_wait_seconds_count", "code") >= 10 + 4


def test_one_code_timeout_is_not_believed_two_are(code_server: ServerProcess) -> None:
    """A wall-clock timeout can be the machine's load: a correct program slowed by its
    neighbours once must run again, not come back 'remembered' for ten minutes. A second
    timeout of the same program is believed."""
    item = {"response": "```python\nimport time  # remembered?\ntime.sleep(60)\n```",
            "tests": [{"input": "", "output": "done"}], "time_limit_s": 1.0}

    def post() -> tuple[dict[str, Any], float]:
        started = time.monotonic()
        r = httpx.post(code_server.url + "/v1/verify/code", json={"items": [item]}, timeout=120)
        return r.json()["results"][0], time.monotonic() - started

    for _ in range(2):  # run, and run again
        result, elapsed = post()
        assert result["tests"][0]["status"] == "timeout" and result["score"] == 0.0
        assert "remembered" not in (result["detail"] or "") and elapsed >= 1.0, result
    before = granted(code_server.url, "code")
    result, _ = post()
    assert "remembered" in result["detail"] and result["score"] == 0.0, result
    assert granted(code_server.url, "code") == before  # answered from memory: it did not run


def test_a_stream_of_small_requests_does_not_starve_another_callers_batch(
        server: ServerProcess) -> None:
    """A client posts a new one-item slow request every 0.4 s; each new request used to join
    level with the least-served and win, so a batch served once waited behind all of them
    until its budget cut it to nulls ([1.0, null x 7] after 60 s). Shared per caller, the
    stream pays for its own items, whatever caller it claims to be: it posts from loopback
    address after address (any local process can: they are one caller), each naming another
    in X-Forwarded-For (believed from the trusted proxy only, 127.0.0.1)."""
    stop = threading.Event()
    streamed: list[httpx.Response] = []
    posts: list[threading.Thread] = []

    def send(item: dict[str, str], k: int) -> None:
        transport = httpx.HTTPTransport(local_address=f"127.0.0.{2 + k % 250}")
        with httpx.Client(transport=transport, timeout=300) as client:
            streamed.append(client.post(server.url + "/v1/verify/math", json={"items": [item]},
                                        headers={"X-Forwarded-For": f"10.0.0.{k % 250}"}))

    def stream() -> None:
        k = 0
        while not stop.is_set():
            item = {"response": f"\\boxed{{{2 + k % 7}^{{{6 + k % 3}^{{{8 + k}^{{9}}}}}}}}",
                    "answer": "3"}
            posts.append(threading.Thread(target=send, args=(item, k)))
            posts[-1].start()
            k += 1
            stop.wait(0.4)

    streamer = threading.Thread(target=stream)
    streamer.start()
    try:
        time.sleep(3.0)  # the stream holds both workers and has a queue
        victim = [{"response": f"\\boxed{{\\frac{{\\sqrt{{{k + 20}}}}}{{2}}}}",
                   "answer": f"\\sqrt{{{k + 20}}}/2"} for k in range(8)]
        out: dict[str, Any] = {}
        post_later(server.url, "/v1/verify/math", victim, 0.0, out, B).join()
    finally:
        stop.set()
        streamer.join()
        for post in posts:
            post.join()
    assert len(streamed) == len(posts) and all(r.status_code == 200 for r in streamed)
    assert out["response"].status_code == 200
    # about one of the stream's items per worker, then the victim's share: inside the budget
    # that used to cut it to nulls
    assert [r["score"] for r in out["response"].json()["results"]] == [1.0] * 8


def test_the_server_says_not_run_for_an_item_the_budget_cut(tmp_path: Path) -> None:
    """Status ``not_run`` with a null score, never ``timeout`` (which is a 0: it ran out of
    time) for an item that never had a worker. Through a real server: a pool forked from this
    test process after torch was imported loses its workers."""
    env = {"REWARD_SERVER_MATH_WORKERS": "1", "REWARD_SERVER_MATH_TIMEOUT_S": "2",
           "REWARD_SERVER_REQUEST_BUDGET_S": "1", "REWARD_SERVER_CACHE_SIZE": "0"}
    towers = [{"response": f"\\boxed{{{k + 3}^{{8^{{7^{{9}}}}}}}}", "answer": "3"}
              for k in range(2)]
    item = {"response": "\\boxed{\\frac{\\sqrt{8}}{2}}", "answer": "\\sqrt{2}"}
    with run_server(tmp_path, env={**env, **PROXY_SETTINGS}) as srv:
        assert httpx.post(srv.url + "/v1/verify/math", json={"items": [item]},
                          timeout=120).json()["results"][0]["score"] == 1.0  # warm
        hog: dict = {}
        thread = threading.Thread(target=lambda: hog.update(r=httpx.post(
            srv.url + "/v1/verify/math", json={"items": towers}, timeout=120)))
        thread.start()
        time.sleep(0.3)
        fresh = {**item, "answer": "\\sqrt{2}\\cdot 1"}  # not the cached verdict
        with httpx.Client(headers=as_caller(B), timeout=60) as other:
            [cut] = other.post(srv.url + "/v1/verify/math", json={"items": [fresh]},
                               timeout=120).json()["results"]
        thread.join()
    assert cut["status"] == "not_run" and cut["score"] is None, cut
    assert "budget of 1 s" in cut["detail"] and cut["extracted"], cut
    ran = hog["r"].json()["results"]  # the hog's own slow items all ran: 0, not cut
    assert [(r["status"], r["score"]) for r in ran] == [("timeout", 0.0)] * 2, ran


# --- inside one item: turns between its tests ----------------------------------------------


@pytest.fixture(scope="module")
def one_container(docker_ready: None, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[ServerProcess]:
    with one_container_server(tmp_path_factory.mktemp("one-container")) as srv:
        yield srv


def test_an_item_of_many_slow_tests_lets_another_callers_item_in_between(
        one_container: ServerProcess) -> None:
    """One container: a hostile item of 10 tests that each sleep through a 1.5 s limit used
    to hold it for all of them (15 s, up to the item budget) while an honest item waited. It
    goes back to the gate between two tests, so the honest item waits about one test."""
    sleeper = {"response": "```python\nimport time\ntime.sleep(60)\n```",
               "tests": [{"input": str(k), "output": "x"} for k in range(10)],
               "time_limit_s": 1.5}
    honest = {"response": "```python\nprint(int(input()) * 2)\n```",
              "tests": [{"input": "21", "output": "42"}]}
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    threads = [post_later(one_container.url, "/v1/verify/code", [sleeper], 0.0, a),
               post_later(one_container.url, "/v1/verify/code", [honest], 2.0, b, B)]
    for thread in threads:
        thread.join()
    [hostile] = a["response"].json()["results"]
    assert (hostile["status"], hostile["score"], hostile["passed"], hostile["total"]) == (
        "ok", 0.0, 0, 10), hostile
    assert [t["status"] for t in hostile["tests"]] == ["timeout"] * 10
    assert b["response"].json()["results"][0]["score"] == 1.0
    # one test's limit and a container's replacement, not the sleeper's remaining ~12 s:
    # answered before the sleeper
    assert b["done"] < a["done"], (b["done"], a["done"])


CHECKER = ("#include <fstream>\n#include <string>\nint main(int argc, char** argv) {\n"
           "  std::ifstream out(argv[2]), ans(argv[3]); std::string a, b;\n"
           "  out >> a; ans >> b; return a == b ? 0 : 1;\n}\n")


@pytest.mark.parametrize("busy", [False, True], ids=["alone", "others-waiting"])
@pytest.mark.parametrize("language", ["python", "c", "checker"])
def test_an_item_that_takes_several_turns_gets_the_verdict_it_would_in_one(
        one_container: ServerProcess, language: str, busy: bool) -> None:
    """Turns change nothing but the container's schedule: every test is run once, in order,
    against the same build (and checker), and the item's budget carries over. Alone, the
    next turn runs in the same container; with others waiting, it goes back to the gate
    (maybe to another container, the checker compiled again off the item's clock)."""
    programs = {
        "python": "import time\nn = int(input())\ntime.sleep(0.3)\nprint(n * n)\n",
        "c": "#include <stdio.h>\n#include <unistd.h>\nint main(void) { long n; "
             "scanf(\"%ld\", &n); usleep(300000); printf(\"%ld\\n\", n * n); return 0; }\n",
    }
    tests = [{"input": str(k), "output": str(k * k)} for k in range(9)]
    tests[6]["output"] = "wrong"  # one failing test in a later turn
    runs_in = "python" if language == "checker" else language
    item = {"response": f"```{runs_in}\n{programs[runs_in]}```", "language": runs_in,
            "tests": tests}
    if language == "checker":
        item["checker"] = {"language": "cpp", "source": CHECKER}
    stop = threading.Event()

    def others() -> None:  # another caller's quick items, one after another
        with httpx.Client(headers=as_caller(B), timeout=60) as c:
            k = 0
            while not stop.is_set():
                c.post(one_container.url + "/v1/verify/code", timeout=120, json={"items": [
                    {"response": f"```python\nprint({k})\n```", "tests": [{"output": str(k)}]}]})
                k += 1

    turns = metric(httpx.get(one_container.url + "/metrics", timeout=60).text,
                   "reward_turns_yielded_total", "code")
    thread = threading.Thread(target=others)
    if busy:
        thread.start()
    try:
        [result] = verify_code(one_container.url, item)
    finally:
        stop.set()
        if busy:
            thread.join()
    yielded = metric(httpx.get(one_container.url + "/metrics", timeout=60).text,
                     "reward_turns_yielded_total", "code") - turns
    assert (yielded >= 1) if busy else (yielded == 0), yielded  # 2.7 s in 1 s turns
    assert (result["status"], result["passed"], result["total"]) == ("ok", 8, 9), result
    assert [t["status"] for t in result["tests"]] == ["passed"] * 6 + ["wrong_answer"] + [
        "passed"] * 2
    assert result["score"] == pytest.approx(8 / 9)
