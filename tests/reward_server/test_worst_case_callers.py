"""A hostile caller of the format and ifeval verifiers against a second caller, through the
real server: what the first sends is never checked on the event loop, and what it cannot
be given is refused naming the field.

The hostile requests are the ones that stalled every caller for a minute: 16 character
classes of 1,000 characters whose ranges ``re`` builds one by one (compiled at admission,
on the event loop: ``/healthz`` waited 56-65 s), and 2,000 ifeval instructions on an 8 KB
response (checked on the event loop: 60-68 s). The second caller (another address) probes
``/healthz`` and sends honest items while the hostile request is in flight; the assertion
is on the order of events (its answers come back before the hostile one's), never on how
long anything took. ``reward_server.worst_case`` holds the inputs (the bench times them)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from reward_server.testing import PROXY_SETTINGS, A, B, as_caller
from reward_server.worst_case import crafted_classes, ifeval_cases, ifeval_instructions
from tests.conftest import ServerProcess, run_server

HOSTILE_ADDRESS, OTHER_ADDRESS = A, B  # two callers (``as_caller``)
ROUNDS = 5  # rounds of the other caller's probes that must be answered meanwhile


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("worst_case_callers"),
                    env={"REWARD_SERVER_CACHE_SIZE": "0", **PROXY_SETTINGS}) as server:
        yield server


def _client(srv: ServerProcess, address: str) -> httpx.Client:
    return httpx.Client(base_url=srv.url, timeout=600, headers=as_caller(address))


def _while_in_flight(srv: ServerProcess, path: str, items: list[dict[str, Any]],
                     probes: list[Callable[[httpx.Client], None]], copies: int = 1
                     ) -> dict[str, Any]:
    """POST ``items`` as one caller (``copies`` requests of them at once); as another, run
    ``probes`` round after round until ``ROUNDS`` rounds were answered while a hostile
    request was still unanswered (or all were answered). Returns the hostile responses and
    those rounds."""
    body = json.dumps({"items": items}).encode()
    answered = threading.Event()
    out: dict[str, Any] = {"rounds": 0, "responses": []}

    def post() -> None:
        with _client(srv, HOSTILE_ADDRESS) as c:
            out["responses"].append(c.post(path, content=body,
                                           headers={"content-type": "application/json"}))
        if len(out["responses"]) == copies:
            answered.set()

    hostile = [threading.Thread(target=post) for _ in range(copies)]
    for thread in hostile:
        thread.start()
    answered.wait(0.5)  # let it reach the server (it is no timing: ROUNDS rounds must pass)
    with _client(srv, OTHER_ADDRESS) as c:
        while not answered.is_set() and out["rounds"] < ROUNDS:
            for probe in probes:
                probe(c)
            if not answered.is_set():  # the whole round came back before the hostile ones
                out["rounds"] += 1
    for thread in hostile:
        thread.join()
    out["response"] = out["responses"][0]
    return out


def _healthz(c: httpx.Client) -> None:
    assert c.get("/healthz").status_code == 200


def _honest_format(c: httpx.Client) -> None:
    r = c.post("/v1/verify/format", json={"items": [
        {"response": "<think>\nx\n</think>\n<answer>\n7\n</answer>", "rules": ["think_answer"]}]})
    assert r.json()["results"][0]["score"] == 1.0, r.text


def _honest_ifeval(c: httpx.Client) -> None:
    # more text than the event loop checks itself: it takes the verifier's thread, which
    # a hostile batch held for a minute
    item = {"response": "word " * 800, "strict": True, "instructions": [
        {"instruction_id": "length_constraints:number_words",
         "kwargs": {"relation": "at least", "num_words": 100}}]}
    r = c.post("/v1/verify/ifeval", json={"items": [item] * 4})
    assert [x["score"] for x in r.json()["results"]] == [1.0] * 4, r.text


def _honest_math(c: httpx.Client) -> None:
    # more text than the event loop triages itself (it takes the triage thread), and surds
    # that a math worker checks
    items = [{"response": "Let us think step by step. " * 24
              + f"\\boxed{{\\frac{{\\sqrt{{{k + 20}}}}}{{2}}}}",
              "answer": f"\\sqrt{{{k + 20}}}/2"} for k in range(16)]
    r = c.post("/v1/verify/math", json={"items": items})
    assert [x["score"] for x in r.json()["results"]] == [1.0] * 16, r.text[:500]


def test_many_large_math_requests_do_not_hold_another_callers_batch(srv: ServerProcess
                                                                     ) -> None:
    """Large requests are triaged on a thread; first come, first served, a caller's
    requests of 2 MiB references (~0.3 s each to scan) put every slice of theirs ahead of
    another caller's ordinary batch: 42 s (8 requests), or its correct items null past a
    shorter budget (fresh-context audit). The callers take the thread in turn: the other
    caller's batch is answered while the hostile requests queued before it still wait
    (first come, first served, all of them had been answered before it)."""
    body = json.dumps({"items": [{"response": "\\boxed{42}", "answer": "1 or " * 400_000}
                                 for _ in range(6)]}).encode()
    answered: list[httpx.Response] = []

    def post() -> None:
        with _client(srv, HOSTILE_ADDRESS) as c:
            answered.append(c.post("/v1/verify/math", content=body,
                                   headers={"content-type": "application/json"}))

    hostile = [threading.Thread(target=post) for _ in range(8)]
    for thread in hostile:
        thread.start()
    deadline = time.monotonic() + 30
    # until most hostile requests queue for the thread: a slice each item (2 MiB), so 30
    # slices waiting is five requests or more behind whichever holds the thread
    while _waiting(srv, "math-triage") < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    at_arrival = len(answered)  # first come, first served: these came first
    with _client(srv, OTHER_ADDRESS) as c:
        _honest_math(c)
    before = len(answered)
    for thread in hostile:
        thread.join()
    # after the honest batch arrives, at most the request whose slice held the thread may
    # finish first (one queue would have answered every queued request first)
    assert before - at_arrival <= 1, (
        f"{before - at_arrival} hostile requests that queued before it were answered first")
    assert [r.status_code for r in answered] == [200] * 8


def _waiting(srv: ServerProcess, gate: str) -> float:
    text = httpx.get(srv.url + "/metrics", timeout=60).text
    found = re.search(rf'^reward_queue_items_waiting{{verifier="{gate}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_sixteen_crafted_classes_do_not_stall_another_caller(srv: ServerProcess) -> None:
    """Compiling them is a worker's, under its time limit: another caller's /healthz and
    format items are answered meanwhile, and the item comes back null naming the field."""
    rules = [{"rule": "final_answer", "regex": pattern} for pattern in crafted_classes(16)]
    out = _while_in_flight(srv, "/v1/verify/format",
                           [{"response": "<think>a</think> 42", "rules": rules}],
                           [_healthz, _honest_format])
    assert out["response"].status_code == 200, out["response"].text[:500]
    assert out["rounds"] == ROUNDS, out["rounds"]
    result = out["response"].json()["results"][0]
    assert (result["status"], result["score"]) == ("invalid_item", None), result
    assert result["detail"].startswith("rules[0].regex: compiling it ran out of time")


def test_the_most_ifeval_instructions_admitted_do_not_stall_another_caller(
        srv: ServerProcess) -> None:
    """2,000 instructions on 8 KB responses, 32 to an item (the cap): each item is a
    worker's, so the verifier's thread and the event loop stay free for others."""
    items = ifeval_cases(8192)["ifeval: 2,000 instructions, strict"]
    out = _while_in_flight(srv, "/v1/verify/ifeval", items,
                           [_healthz, _honest_ifeval, _honest_format])
    assert out["response"].status_code == 200, out["response"].text[:500]
    assert out["rounds"] == ROUNDS, out["rounds"]
    results = out["response"].json()["results"]
    assert {r["status"] for r in results} == {"ok"}, results[0]


@pytest.mark.parametrize(("path", "item", "field"), [
    ("/v1/verify/ifeval", {"response": "word " * 1600, "instructions": "2000"},
     "items[0].instructions: 2000 instructions; at most 32"),
    ("/v1/verify/ifeval", {"response": "x", "instruction_id_list": ["punctuation:no_comma"] * 33},
     "items[0].instruction_id_list: 33 instructions; at most 32"),
    ("/v1/verify/ifeval", {"response": "x", "instructions": [
        {"instruction_id": "keywords:existence", "kwargs": {"keywords": ["a"] * 33}}]},
     "items[0]: instructions[0].kwargs.keywords: 33 entries; at most 32"),
    ("/v1/verify/format", {"response": "x", "rules": ["think"] * 17},
     "items[0].rules: 17 rules; at most 16"),
    ("/v1/verify/format", {"response": "x", "rules": [
        {"rule": "final_answer", "regex": "a" * 1001}]},
     "items[0].rules[0].final_answer.regex: regex is 1001 characters; at most 1000"),
])
def test_an_item_over_a_cap_is_refused_naming_the_field(
        srv: ServerProcess, path: str, item: dict[str, Any], field: str) -> None:
    """Refused at admission, before any of its work: a 422 for the request with
    on_invalid=error, else the item's own invalid_item; another caller is answered."""
    if item.get("instructions") == "2000":
        item = {**item, "instructions": ifeval_instructions(2000)}
    with _client(srv, HOSTILE_ADDRESS) as c:
        r = c.post(path, params={"on_invalid": "error"}, json={"items": [item]})
        assert r.status_code == 422 and field in r.json()["detail"], r.text[:500]
        result = c.post(path, json={"items": [item]}).json()["results"][0]
        assert (result["status"], result["score"]) == ("invalid_item", None)
        assert result["detail"].startswith(field), result["detail"]
    with _client(srv, OTHER_ADDRESS) as c:
        _healthz(c)
