"""The ifeval verifier through a real server on loopback: its route, mixed batches, its schema,
bad items, metrics and the cache, a 2 MiB hostile response beside a small request, and a
server without the ifeval extra."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.conftest import ServerProcess, run_server
from tests.helpers.beside import beside_a_big_request

WORDS = {"instruction_id": "length_constraints:number_words",
         "kwargs": {"relation": "at least", "num_words": 3}}
NO_COMMA = {"instruction_id": "punctuation:no_comma"}
ENGLISH = {"instruction_id": "language:response_language", "kwargs": {"language": "en"}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory):
    with run_server(tmp_path_factory.mktemp("ifeval")) as server:
        yield server


def _verify(srv: ServerProcess, items: list[dict], timeout: float = 60) -> list[dict]:
    r = httpx.post(srv.url + "/v1/verify/ifeval", json={"items": items}, timeout=timeout)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def _metric(srv: ServerProcess, name: str, **labels: str) -> float:
    text = httpx.get(srv.url + "/metrics", timeout=60).text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            total += float(m.group(2))
    return total


def test_scores_the_fraction_followed_in_each_shape(srv: ServerProcess) -> None:
    results = _verify(srv, [
        {"response": "Rivers run, to the sea.", "instructions": [WORDS, NO_COMMA]},
        {"response": "Rivers run, to the sea.", "instructions": [WORDS, NO_COMMA],
         "all_or_nothing": True},
        {"response": "Rivers run to the sea.", "instruction_id_list": [
            "length_constraints:number_words", "punctuation:no_comma"],
         "kwargs": [{"relation": "at least", "num_words": 3, "keywords": None}, {}]},
        {"response": "Rivers run to the sea.",
         "ground_truth": str([{"instruction_id": ["punctuation:no_comma"], "kwargs": [None]}])},
        {"response": "Sure:\n\"Rivers run to the sea.\"\nHope it helps", "strict": False,
         "instructions": [{"instruction_id": "startend:quotation"}]},
        {"response": "   ", "instructions": [NO_COMMA]},
    ])
    assert [r["score"] for r in results] == [0.5, 0.0, 1.0, 1.0, 1.0, 0.0]
    assert {r["status"] for r in results} == {"ok"}
    assert results[0]["instructions"] == [
        {"instruction_id": "length_constraints:number_words", "followed": True},
        {"instruction_id": "punctuation:no_comma", "followed": False}]
    assert results[5]["detail"] == "empty response: follows nothing"


def test_in_a_mixed_batch_and_in_the_verifier_list(srv: ServerProcess) -> None:
    r = httpx.post(srv.url + "/v1/rewards", json={"items": [
        {"verifier": "math", "response": "\\boxed{2}", "answer": "2"},
        {"verifier": "ifeval", "response": "All in English words here.",
         "instructions": [ENGLISH, NO_COMMA]},
        {"verifier": "math", "response": "\\boxed{3}", "answer": "2"},
    ]}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["rewards"] == [1.0, 1.0, 0.0]
    listed = {v["name"]: v for v in httpx.get(srv.url + "/v1/verifiers", timeout=60).json()["verifiers"]}
    schema = str(listed["ifeval"])
    for field in ("instructions", "instruction_id_list", "ground_truth", "strict",
                  "all_or_nothing", "length_constraints:number_words"):
        assert field in schema


def test_a_bad_item_gets_its_own_result_naming_the_field(srv: ServerProcess) -> None:
    results = _verify(srv, [
        {"response": "x", "instructions": [NO_COMMA, {"instruction_id": "keywords:nope"}]},
        {"response": "x", "instructions": [{"instruction_id": "keywords:existence",
                                            "kwargs": {"keywords": "river"}}]},
        {"response": "fine", "instructions": [NO_COMMA]},
    ])
    assert [r["status"] for r in results] == ["invalid_item", "invalid_item", "ok"]
    assert results[0]["score"] is None
    assert results[0]["detail"].startswith(
        "items[0].instructions[1].instruction_id: Value error, unknown instruction "
        "'keywords:nope'; known: change_case:capital_word_frequency, ")
    assert "punctuation:no_comma" in results[0]["detail"]  # the list of known ids
    assert results[1]["detail"].startswith("items[1].instructions[0]: Value error, "
                                           "keywords:existence: kwargs.keywords:")


def test_metrics_and_the_cache(srv: ServerProcess) -> None:
    item = {"response": "A response seen twice, word for word.", "instructions": [WORDS]}
    ok, hits = (_metric(srv, "reward_items_total", verifier="ifeval", status="ok"),
                _metric(srv, "reward_cache_hits_total", verifier="ifeval"))
    _verify(srv, [item])
    _verify(srv, [item])
    assert _metric(srv, "reward_items_total", verifier="ifeval", status="ok") == ok + 2
    assert _metric(srv, "reward_cache_hits_total", verifier="ifeval") == hits + 1
    assert _metric(srv, "reward_item_seconds_count", verifier="ifeval") >= 2


def test_a_2_mib_hostile_response_does_not_stall_a_small_request(srv: ServerProcess) -> None:
    """The largest response the server accepts, built to make the reference's regexes
    backtrack, in loose mode (eight copies): it goes to a worker process, and a small
    request meanwhile is answered, the server process (its event loop) spending little CPU:
    CPU time, not latency, which the machine's load decides."""
    hostile = "[<<*a. " * (2 * 1024 * 1024 // 7)
    every = [{"instruction_id": i, "kwargs": k} for i, k in {
        "detectable_content:number_placeholders": {"num_placeholders": 1},
        "detectable_format:title": {}, "detectable_format:number_bullet_lists": {
            "num_bullets": 1}, "length_constraints:number_sentences": {
            "relation": "at least", "num_sentences": 2}, "change_case:capital_word_frequency": {
            "capital_frequency": 1, "capital_relation": "at least"},
        "detectable_format:number_highlighted_sections": {"num_highlights": 1}}.items()]

    def meanwhile(_answered: Callable[[], bool]) -> None:
        assert _verify(srv, [{"response": "small", "instructions": [NO_COMMA]}])[0]["score"] == 1

    # head start: the big one is being checked
    big, smalls, cpu_s = beside_a_big_request(srv, lambda: _verify(
        srv, [{"response": hostile, "instructions": every, "strict": False}], timeout=120),
        meanwhile, head_start_s=1.0)
    print(f"server process CPU {cpu_s:.2f} s, {smalls} small requests")
    assert smalls, "the big request ended before a small one was sent"
    # the regexes backtracking on the loop held it for seconds of CPU (a worker's limit)
    assert cpu_s < 2.0, cpu_s
    assert big[0]["status"] in ("ok", "timeout"), big


def test_a_server_without_langdetect_starts_and_says_what_is_missing(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "langdetect"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no langdetect here')\n")
    with run_server(tmp_path / "server", env={"PYTHONPATH": str(shadow.parent)}) as server:
        results = _verify(server, [
            {"response": "Plain English text.", "instructions": [NO_COMMA, ENGLISH]},
            {"response": "Plain English text.", "instructions": [NO_COMMA]},
        ])
    assert results[0]["status"] == "unavailable" and results[0]["score"] is None
    assert "pip install 'verifiable-rewards[ifeval]'" in results[0]["detail"]
    assert [v["followed"] for v in results[0]["instructions"]] == [True, None]
    assert results[1]["score"] == 1.0
