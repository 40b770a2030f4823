"""The reasoning_gym verifier through the real server: every task of the pinned library
scored as the library scores it in-process, the answer conventions, the guard against
scorers that run the answer as code, a stuck scorer, and bad input."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

from reward_server.verifiers.reasoning_gym import corrections
from reward_server.verifiers.reasoning_gym.guard import UNEVALUATED
from tests.conftest import ServerProcess, run_server
from tests.helpers.code_answers import EVAL_TASKS, PAYLOADS

reasoning_gym = pytest.importorskip("reasoning_gym")

ENTRIES_PER_TASK = 2
SKIP_TASKS = {"composite"}  # a mixture of the others; it needs a list of them to build
WRONG = "zzz not it"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, docker_ready: None
        ) -> Iterator[ServerProcess]:
    """Scoring in the sandbox (the image carries the library: sandbox/build_image.sh)."""
    env = {"REWARD_SERVER_REASONING_GYM_TIMEOUT_S": "3"}
    with run_server(tmp_path_factory.mktemp("rg"), env=env) as server:
        yield server


def _entries() -> list[tuple[str, dict[str, Any], Any]]:
    """(task, entry, the dataset object) for every task, as the library produces them."""
    from reasoning_gym.factory import DATASETS

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for task in sorted(set(DATASETS) - SKIP_TASKS):
            dataset = reasoning_gym.create_dataset(task, size=ENTRIES_PER_TASK, seed=11)
            out += [(task, dataset[i], dataset) for i in range(ENTRIES_PER_TASK)]
    return out


def _in_process(task: str, dataset: Any, answer: str, entry: dict[str, Any]) -> float:
    """The library's score, with the service's corrections of what its scorers pay by mistake
    (``corrections``: each tested against the library's own in
    ``test_tricks_the_librarys_own_scorers_pay_are_not_paid``); a scorer that raises on the
    answer (prime_factorization's on text that is no number) gives it nothing."""
    try:
        return corrections.score(task, answer, entry, dataset.score_answer)
    except Exception:  # noqa: BLE001
        return 0.0


def _restates_the_question(task: str, answer: str) -> bool:
    """An answer the task's own generator left as an unevaluated ``Integral`` (SymPy found
    no closed form: about one intermediate_integration entry in eight). The library pays it
    1; here it is the question restated, 0 (guard.UNEVALUATED)."""
    return task in _SYMPY_PARSED and re.search(
        r"\b(?:" + "|".join(sorted(UNEVALUATED)) + r")\s*\(", answer) is not None


_SYMPY_PARSED = {"simple_integration", "intermediate_integration", "polynomial_multiplication"}


def _post(srv: ServerProcess, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = httpx.post(srv.url + "/v1/verify/reasoning_gym", timeout=300,
                   content=json.dumps({"items": items}, default=str),
                   headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_every_task_scores_as_the_library_scores_it_in_process(srv: ServerProcess) -> None:
    """Each task's own answer and a wrong one, sent as JSON (an entry's tuples become
    lists): the server's score equals the library's on the entry as it produced it."""
    entries = _entries()
    items, expected = [], []
    for task, entry, dataset in entries:
        for answer in ([entry["answer"]] if isinstance(entry["answer"], str) else []) + [WRONG]:
            items.append({"response": f"<think>...</think>\n<answer>{answer}</answer>",
                          "entry": entry})
            want = 0.0 if _restates_the_question(task, answer) else _in_process(
                task, dataset, answer, entry)
            expected.append((task, answer, want))
    results = _post(srv, items)
    differ = [(task, answer[:40], want, got["score"], got.get("detail"))
              for (task, answer, want), got in zip(expected, results, strict=True)
              if got["score"] != want]
    assert not differ, differ
    own = [want for (_, answer, want) in expected if answer != WRONG]
    assert sum(s == 1.0 for s in own) / len(own) > 0.95  # the tasks' answers do score 1
    assert len({task for task, _, _ in entries}) >= 100


def test_the_answer_is_the_last_answer_tag_after_thinking(srv: ServerProcess) -> None:
    entry = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=1)[0]
    right, wrong = entry["answer"], str(int(entry["answer"]) + 1)
    cases = [  # (response, extra item fields, score, status)
        (f"<answer>{right}</answer>", {}, 1.0, "ok"),
        (f"<answer>{wrong}</answer> on second thought <answer>{right}</answer>", {}, 1.0, "ok"),
        (f"<think><answer>{right}</answer></think> <answer>{wrong}</answer>", {}, 0.0, "ok"),
        (f"<think>it is <answer>{right}</answer>", {}, 0.0, "no_answer"),  # cut off thinking
        (f"<think>x</think><answer>{right}</answer>", {"think": "keep"}, 1.0, "ok"),
        (f"The answer is {right}.", {}, 0.0, "no_answer"),
        (f"so \\boxed{{{right}}}", {"extract": "boxed"}, 1.0, "ok"),
        (f"work\n\n{right}\n", {"extract": "last_line"}, 1.0, "ok"),
        (f"  {right} ", {"extract": "whole"}, 1.0, "ok"),
        (f"2 + 2 = {wrong}, no: {right}.", {"extract": "last_number"}, 1.0, "ok"),
        (f"{right} + 1 is {wrong}.", {"extract": "last_number"}, 0.0, "ok"),
        ("no digits here", {"extract": "last_number"}, 0.0, "no_answer"),
    ]
    results = _post(srv, [{"response": r, "entry": entry, **f} for r, f, _, _ in cases])
    assert [(x["score"], x["status"]) for x in results] == [(s, st) for *_, s, st in cases]


def test_flat_fields_as_a_dataset_row_ships_them(srv: ServerProcess) -> None:
    """A dataset saved from reasoning-gym has question, answer and metadata columns (what TRL
    hands a reward function): the same fields, flat."""
    dataset = reasoning_gym.create_dataset("letter_counting", size=1, seed=2)
    entry = dataset[0]
    results = _post(srv, [{"response": f"<answer>{entry['answer']}</answer>", **entry},
                          {"response": "<answer>-1</answer>", "answer": entry["answer"],
                           "metadata": entry["metadata"], "task": "letter_counting"}])
    # the library's own partial credit for a number that is wrong (0.5 here) comes through
    assert [r["score"] for r in results] == [1.0, dataset.score_answer("-1", entry)] != [1.0, 1.0]


def test_no_answer_runs_as_code_in_the_scorers_that_would_run_it(srv: ServerProcess,
                                                                  tmp_path: Path) -> None:
    items, markers = [], []
    for task in EVAL_TASKS:
        entry = reasoning_gym.create_dataset(task, size=1, seed=5)[0]
        for k, payload in enumerate(PAYLOADS):
            marker = tmp_path / f"{task}-{k}"
            markers.append(marker)
            items.append({"response": f"<answer>{payload.format(marker=marker)}</answer>",
                          "entry": entry})
    results = _post(srv, items)
    assert not [m.name for m in markers if m.exists()]
    assert all(r["status"] in ("ok", "error") for r in results), results
    assert max(r["score"] for r in results) < 0.1  # at most a task's credit for the format
    # the guard leaves honest answers alone in those same tasks
    honest = [{"response": f"<answer>{e['answer']}</answer>", "entry": e} for e in (
        next(e for e in reasoning_gym.create_dataset(t, size=20, seed=5)
             if not _restates_the_question(t, e["answer"])) for t in EVAL_TASKS)]
    assert [r["score"] for r in _post(srv, honest)] == [1.0] * len(EVAL_TASKS)


def test_a_stuck_scorer_times_out_alone(srv: ServerProcess) -> None:
    """An answer a scorer cannot finish with (SymPy evaluating a power of a billion digits,
    in C, where no signal stops it) times out (0); the answers handed to the worker with it
    are scored."""
    entry = reasoning_gym.create_dataset("polynomial_multiplication", size=1, seed=3)[0]
    good = [{"response": f"<answer>{entry['answer']}</answer>", "entry": entry},
            {"response": "<answer>x</answer>", "entry": entry}]
    stuck = {"response": "<answer>3**(10**9) + x</answer>",
             "entry": entry}
    results = _post(srv, [good[0], stuck, good[1]])
    assert [r["status"] for r in results] == ["ok", "timeout", "ok"], results
    assert [r["score"] for r in results] == [1.0, 0.0, 0.0]
    # a copy a moment later is answered from memory, without holding a worker again; a
    # timeout that may have been the machine's load (the worker got less than the limit in
    # CPU) is believed the second time, so on a loaded machine one copy runs again first
    again = _post(srv, [stuck])[0]
    if "remembered" not in again["detail"]:
        assert again["status"] == "timeout", again
        again = _post(srv, [stuck])[0]
    assert again["status"] == "timeout" and "remembered" in again["detail"], again


def test_bad_items_name_the_field(srv: ServerProcess) -> None:
    entry = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=1)[0]
    bad = [
        ({"response": "x", "task": "chess", "metadata": {}}, "unknown task 'chess'; known: ab,"),
        ({"response": "x"}, "'entry' (or 'metadata', with 'answer') is required"),
        ({"response": "x", "metadata": {"a": 1}}, "'task' is required"),
        ({"response": "x", "entry": entry, "answer": "3"}, "not both"),
        ({"response": "x", "entry": entry, "extract": "last"}, "items[4].extract"),
    ]
    results = _post(srv, [item for item, _ in bad])
    for (_, fragment), result in zip(bad, results, strict=True):
        assert result["status"] == "invalid_item" and fragment in result["detail"], result


def test_mixed_with_math_in_one_request(srv: ServerProcess) -> None:
    entry = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=1)[0]
    r = httpx.post(srv.url + "/v1/rewards", json={"items": [
        {"verifier": "math", "response": "\\boxed{4}", "answer": "4"},
        {"verifier": "reasoning_gym", "response": f"<answer>{entry['answer']}</answer>",
         "entry": entry},
    ]}, timeout=60)
    assert r.json()["rewards"] == [1.0, 1.0]
    info = {v["name"]: v for v in httpx.get(srv.url + "/v1/verifiers", timeout=60).json()["verifiers"]}
    assert "entry" in info["reasoning_gym"]["item_schema"]["properties"]


def test_without_the_sandbox_image_items_are_unscorable_naming_the_build(tmp_path: Path
                                                                         ) -> None:
    """No image to score in (none built, or built without the scorers): the server still
    serves math, and a reasoning_gym item is unscorable (null), naming the command."""
    env = {"REWARD_SERVER_SANDBOX_IMAGE": "verifiable-rewards-sandbox:no-such-tag"}
    with run_server(tmp_path, env=env) as server:
        r = httpx.post(server.url + "/v1/rewards", timeout=60, json={"items": [
            {"verifier": "math", "response": "\\boxed{4}", "answer": "4"},
            {"verifier": "reasoning_gym", "response": "<answer>1</answer>",
             "task": "basic_arithmetic", "metadata": {}}]})
    out = r.json()
    assert out["rewards"] == [1.0, None]
    assert out["results"][1]["status"] == "unavailable"
    assert "bash sandbox/build_image.sh" in out["results"][1]["detail"]


def test_host_scoring_an_operators_opt_in_needs_no_sandbox(tmp_path: Path) -> None:
    """``host_scoring`` (off by default; a trusted setup without Docker): the answers are
    scored in the host's guarded workers, with no image to score in."""
    entry = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=1)[0]
    env = {"REWARD_SERVER_REASONING_GYM_HOST_SCORING": "true",
           "REWARD_SERVER_SANDBOX_IMAGE": "verifiable-rewards-sandbox:no-such-tag"}
    with run_server(tmp_path, env=env) as server:
        r = httpx.post(server.url + "/v1/verify/reasoning_gym", timeout=60, json={"items": [
            {"response": f"<answer>{entry['answer']}</answer>", "entry": entry},
            {"response": "<answer>-1</answer>", "entry": entry}]})
    assert [(x["status"], x["score"]) for x in r.json()["results"]] == [("ok", 1.0),
                                                                         ("ok", 0.0)]


def test_tricks_the_librarys_own_scorers_pay_are_not_paid(srv: ServerProcess) -> None:
    """countdown misses numbers written 309e0, puzzle24 never checks which numbers were used,
    spell_backward's float sum misses its own penalty, complex_arithmetic pays ``nan``,
    game_of_life_halting pays any answer, coin_flip pays ``0``: each paid in-process, not
    here."""
    countdown = reasoning_gym.create_dataset("countdown", size=1, seed=1)
    puzzle = reasoning_gym.create_dataset("puzzle24", size=1, seed=1)
    c, p = countdown[0], puzzle[0]
    numbers, target = c["metadata"]["numbers"], c["metadata"]["target"]
    forged = "*".join(map(str, numbers)) + f"*0e0+{target}e0"
    words = {n: reasoning_gym.create_dataset("spell_backward", size=40, seed=n) for n in (1,)}
    spell = next(e for e in words[1] if len(e["answer"]) == 7)
    complex_ = reasoning_gym.create_dataset("complex_arithmetic", size=1, seed=1)
    life = reasoning_gym.create_dataset("game_of_life_halting", size=20, seed=1)
    halts = next(e for e in life if e["answer"] == "True")
    flips = reasoning_gym.create_dataset("coin_flip", size=40, seed=1)
    flip = next(e for e in flips if e["answer"].startswith("0.") and len(e["answer"]) >= 5)
    cases = [  # (task's dataset, entry, answer, what the library pays, what we pay)
        (countdown, c, forged, 1.0, 0.01),
        (countdown, c, c["answer"], 1.0, 1.0),
        (puzzle, p, "4*6*1*1", 1.0, 0.01),
        (puzzle, p, p["answer"], 1.0, 1.0),
        (words[1], spell, spell["answer"] + "zzz", 0.9999999999999998, 0.8),
        (words[1], spell, spell["answer"], 1.0, 1.0),
        (complex_, complex_[0], "nan", 1.0, 0.0),
        (complex_, complex_[0], complex_[0]["answer"], 1.0, 1.0),
        (life, halts, "False", 1.0, 0.0),
        (life, halts, "banana", 1.0, 0.0),
        (life, halts, "True", 1.0, 1.0),
        (flips, flip, "0", 1.0, 1 / len(f"{float(Fraction(flip['answer'])):.10g}")),
        (flips, flip, flip["answer"], 1.0, 1.0),
    ]
    for dataset, entry, answer, paid, _ in cases:
        assert dataset.score_answer(answer, entry) == paid, (answer, paid)
    results = _post(srv, [{"response": f"<answer>{a}</answer>", "entry": e}
                          for _, e, a, _, _ in cases])
    assert [r["score"] for r in results] == [ours for *_, ours in cases]


def test_an_entry_made_with_another_config_is_scored_with_it(srv: ServerProcess) -> None:
    """arc_agi with the board written as lists: its own answer is 0 under the default board
    format, 1 under the config the dataset was made with."""
    import dataclasses

    from reasoning_gym.arc.board_format import BoardFormattingOptions

    dataset = reasoning_gym.create_dataset(
        "arc_agi", size=1, seed=1,
        board_format_opts=BoardFormattingOptions(col_delimiter=",", array_brackets=True))
    entry = dataset[0]
    config = json.loads(json.dumps(dataclasses.asdict(dataset.config), default=str))
    item = {"response": f"<answer>{entry['answer']}</answer>", "entry": entry}
    results = _post(srv, [item, {**item, "config": config},
                          {**item, "config": {"no_such_field": 1}}])
    assert [r["score"] for r in results] == [0.0, 1.0, None]
    assert results[2]["status"] == "bad_entry" and "config" in results[2]["detail"]
