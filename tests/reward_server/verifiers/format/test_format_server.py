"""The format verifier through a real server on loopback: its route, /v1/rewards items, its
schema in /v1/verifiers, bad items, metrics and the cache, and a caller's catastrophic regex
over a 1 MiB response beside other requests."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ServerProcess, run_server
from tests.helpers.beside import beside_a_big_request

R1 = "<think>\nLet me add.\n</think>\n<answer>\n42\n</answer>"
BOXED = {"rule": "final_answer", "pattern": "boxed"}
# (x+x+)+y backtracks exponentially over a run of x with no y: an honest-looking pattern
HOSTILE = {"rule": "final_answer", "regex": r"(x+x+)+y", "after_think": False}
MIB = 1 << 20
STARTUP_S = 240  # a loaded CI machine starts a server's workers slowly


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory):
    with run_server(tmp_path_factory.mktemp("format"), env={
            "REWARD_SERVER_FORMAT_TIMEOUT_S": "1.0"}, startup_s=STARTUP_S) as server:
        yield server


def _verify(srv: ServerProcess, items: list[dict], timeout: float = 60, **params: str
            ) -> list[dict]:
    r = httpx.post(srv.url + "/v1/verify/format", json={"items": items}, params=params,
                   timeout=timeout)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def _metric(srv: ServerProcess, name: str, **labels: str) -> float:
    text = httpx.get(srv.url + "/metrics", timeout=60).text
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


def test_scores_each_rule_and_says_which_failed(srv: ServerProcess) -> None:
    results = _verify(srv, [
        {"response": R1, "rules": ["think_answer", "tag_count"]},
        {"response": "<think>\nStill thinking when", "rules": ["think_answer", "tag_count",
                                                                BOXED]},
        {"response": "Let me add.\n</think>\nSo \\boxed{42}", "prefix": "<think>\n",
         "rules": ["think", BOXED]},
        {"response": R1 + "\nMore.", "rules": [{"rule": "think_answer", "strict": True},
                                                "think_answer"], "all_or_nothing": True},
    ])
    assert [r["score"] for r in results] == [1.0, 0.25 / 3, 1.0, 0.0]
    assert {r["status"] for r in results} == {"ok"}
    cut = results[1]["rules"]
    assert [(v["rule"], v["score"], v["passed"]) for v in cut] == [
        ("think_answer", 0.0, False), ("tag_count", 0.25, False),
        ("final_answer:boxed", 0.0, False)]
    assert cut[0]["reason"] == "<think> is never closed (cut off while thinking?)"
    assert results[2]["rules"][1]["match"] == "\\boxed{42}"
    assert results[3]["rules"][0]["reason"] == "text after </answer>"


def test_in_a_mixed_batch_and_in_the_verifier_list(srv: ServerProcess) -> None:
    r = httpx.post(srv.url + "/v1/rewards", json={"items": [
        {"verifier": "math", "response": "\\boxed{2}", "answer": "2"},
        {"verifier": "format", "response": R1, "rules": ["tag_count"]},
        {"verifier": "format", "response": "no tags", "rules": ["tag_count"]},
    ]}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["rewards"] == [1.0, 1.0, 0.0]
    listed = {v["name"]: v for v in httpx.get(srv.url + "/v1/verifiers", timeout=60).json()["verifiers"]}
    schema = str(listed["format"])
    for word in ("think_answer", "tag_count", "final_answer", "answer_line", "regex",
                 "prefix", "all_or_nothing", "strict", "reason"):
        assert word in schema, word


def test_a_bad_item_gets_its_own_result_naming_the_known_rules(srv: ServerProcess) -> None:
    items = [{"response": "x", "rules": ["think", "tags"]},
             {"response": "x", "rules": [{"rule": "final_answer", "regex": "(a"}]},
             {"response": R1, "rules": ["think"]}]
    results = _verify(srv, items)
    assert [r["status"] for r in results] == ["invalid_item", "invalid_item", "ok"]
    assert results[0]["score"] is None
    assert results[0]["detail"].startswith("items[0].rules[1]: Input tag 'tags' found using "
                                           "'rule' does not match any of the expected tags: "
                                           "'think', 'think_answer', 'tag_count', "
                                           "'final_answer'")
    assert "regex does not compile" in results[1]["detail"]
    r = httpx.post(srv.url + "/v1/verify/format", params={"on_invalid": "error"},
                   json={"items": items}, timeout=60)
    assert r.status_code == 422 and "'tags'" in r.text


def test_metrics_and_the_cache(srv: ServerProcess) -> None:
    item = {"response": R1 + " seen twice", "rules": ["think_answer", BOXED]}
    ok = _metric(srv, "reward_items_total", verifier="format", status="ok")
    hits = _metric(srv, "reward_cache_hits_total", verifier="format")
    first, again = _verify(srv, [item]), _verify(srv, [item])
    assert first == again
    assert _metric(srv, "reward_items_total", verifier="format", status="ok") == ok + 2
    assert _metric(srv, "reward_cache_hits_total", verifier="format") == hits + 1
    assert _metric(srv, "reward_item_seconds_count", verifier="format") >= 2


def test_a_caller_regex_is_searched_in_a_worker(srv: ServerProcess) -> None:
    rule = {"rule": "final_answer", "regex": r"answer is (\d+)", "flags": "i"}
    results = _verify(srv, [{"response": f"<think>x</think> The ANSWER is {n}.",
                             "rules": [rule]} for n in range(300)]  # two chunks
                      + [{"response": "<think>x</think> no number", "rules": [rule]}])
    assert [r["rules"][0]["match"] for r in results[:3]] == [
        "ANSWER is 0", "ANSWER is 1", "ANSWER is 2"]
    assert [r["score"] for r in results] == [1.0] * 300 + [0.0]


def test_a_catastrophic_regex_over_1_mib_times_out_alone(srv: ServerProcess) -> None:
    """The hostile search runs out of time in the worker (its rule 0, status timeout); the
    honest searches of its batch are answered; meanwhile other requests, built-in rules
    and regexes, are answered; and the same search again is remembered, not run again."""
    hostile = {"response": "<think>a</think>" + "x" * MIB, "rules": [HOSTILE, "think"]}
    honest = {"response": "<think>a</think> 42", "rules": [
        {"rule": "final_answer", "regex": r"\d+\Z"}]}
    regex: list[bool] = []  # whether each was answered before the big request

    def meanwhile(answered: Callable[[], bool]) -> None:
        assert _verify(srv, [{"response": R1, "rules": ["think_answer"]}])[0]["score"] == 1
        if len(regex) < 2:
            small = _verify(srv, [{"response": f"n{len(regex)} 7", "rules": [{
                "rule": "final_answer", "regex": r"\d\Z"}]}])[0]
            assert small["score"] == 1.0, small
            regex.append(not answered())

    # head start: the hostile search is in the worker
    big, built_in, cpu_s = beside_a_big_request(
        srv, lambda: _verify(srv, [hostile, honest], timeout=120), meanwhile, head_start_s=0.3)
    print(f"server process CPU {cpu_s:.2f} s, {built_in} built-in requests, regex {regex}")
    assert built_in, "the big request ended before a small one was sent"
    # the hostile search holds its worker for its whole 1 s limit, twice. Built-in rules run
    # in the server: answered meanwhile, the server process spending less CPU than one such
    # limit (not the search, nor a held loop). A regex waits for a turn of the one worker,
    # between the hostile's turns: answered before the hostile's request, not after it.
    assert cpu_s < 1.0, cpu_s
    assert regex and all(regex), regex
    slow, fine = big
    assert (slow["status"], slow["score"]) == ("timeout", 0.5), slow
    assert slow["rules"][0]["status"] == "timeout"
    assert "ran out of time" in slow["rules"][0]["reason"]
    assert (fine["status"], fine["score"]) == ("ok", 1.0), fine
    # believed at once if it used its limit in CPU time, else at its second strike (a
    # loaded machine may have caused the first)
    again = [_verify(srv, [hostile])[0] for _ in range(2)]
    assert [(r["status"], r["score"]) for r in again] == [("timeout", 0.5)] * 2
    assert "remembered" in again[1]["rules"][0]["reason"]


def test_a_server_with_the_cache_off_scores_the_same(tmp_path) -> None:
    with run_server(tmp_path, env={"REWARD_SERVER_CACHE_SIZE": "0"},
                    startup_s=STARTUP_S) as server:
        items = [{"response": R1, "rules": ["think_answer", "tag_count", BOXED]}] * 2
        assert [r["score"] for r in _verify(server, items)] == [2 / 3, 2 / 3]
        assert _metric(server, "reward_cache_hits_total", verifier="format") == 0
