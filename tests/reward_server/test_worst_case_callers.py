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
import threading
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
                     probes: list[Callable[[httpx.Client], None]]) -> dict[str, Any]:
    """POST ``items`` as one caller; as another, run ``probes`` round after round until
    ``ROUNDS`` rounds were answered while the hostile request was still unanswered (or it
    was answered). Returns the hostile response and those rounds."""
    body = json.dumps({"items": items}).encode()
    answered = threading.Event()
    out: dict[str, Any] = {"rounds": 0}

    def post() -> None:
        with _client(srv, HOSTILE_ADDRESS) as c:
            out["response"] = c.post(path, content=body,
                                     headers={"content-type": "application/json"})
        answered.set()

    hostile = threading.Thread(target=post)
    hostile.start()
    answered.wait(0.5)  # let it reach the server (it is no timing: ROUNDS rounds must pass)
    with _client(srv, OTHER_ADDRESS) as c:
        while not answered.is_set() and out["rounds"] < ROUNDS:
            for probe in probes:
                probe(c)
            if not answered.is_set():  # the whole round came back before the hostile one
                out["rounds"] += 1
    hostile.join()
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
