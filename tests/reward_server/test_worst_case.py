"""Worst-case text through the real server: a field at the size limit, written to make
extraction, the guards or the fast path scan it again and again, never stalls the event
loop. While such a request runs, ``/healthz`` and another client's small item answer
within a couple of seconds, and the hostile item gets a verdict (0), not null.

The shapes come from ``bench/bench_worst_case.py``'s table (``reward_server.worst_case``
holds them, so the bench and these tests time the same inputs)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from reward_server.worst_case import FIELD_BYTES, QUESTION_CHARS, math_cases
from tests.conftest import ServerProcess, run_server
from tests.helpers.cpu import server_cpu_s

# Before the scans were linear, one hostile item held the event loop 10-50 s of CPU, and
# /healthz and a \boxed{6} item waited behind it; linear, the whole table costs the server
# process seconds (CPU time: the machine's load does not inflate it as it does the clock).
LOOP_CPU_S = 10.0


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_CACHE_SIZE": "0", "REWARD_SERVER_MATH_TIMEOUT_S": "3"}
    with run_server(tmp_path_factory.mktemp("worst_case"), env=env) as server:
        yield server


def _while_posting(srv: ServerProcess, items: list[dict[str, Any]]) -> dict[str, Any]:
    """POST ``items`` and, until it returns, ask ``/healthz`` and post another client's
    small math item again and again; the CPU the server process spent meanwhile."""
    out: dict[str, Any] = {"probes": 0}
    # encoded here: encoding tens of MB on the posting thread would hold this process's
    # interpreter, and the probes' latencies would be the client's own
    body = json.dumps({"items": items}).encode()

    def post() -> None:
        with httpx.Client(base_url=srv.url, timeout=300) as c:
            out["response"] = c.post("/v1/verify/math", content=body,
                                     headers={"content-type": "application/json"})

    cpu_before = server_cpu_s(srv)
    hostile = threading.Thread(target=post)
    hostile.start()
    with httpx.Client(base_url=srv.url, timeout=300) as c:
        while hostile.is_alive():
            assert c.get("/healthz").status_code == 200
            r = c.post("/v1/verify/math",
                       json={"items": [{"response": "so \\boxed{6}", "answer": "6"}]})
            assert r.json()["results"][0]["correct"] is True
            out["probes"] += 1
            time.sleep(0.05)
    hostile.join()
    out["cpu_s"] = server_cpu_s(srv) - cpu_before
    print(f"server process CPU {out['cpu_s']:.2f} s, {out['probes']} probes")
    return out


def _check_live(out: dict[str, Any]) -> list[dict[str, Any]]:
    assert out["response"].status_code == 200, out["response"].text[:500]
    assert out["probes"] >= 1  # answered while the hostile request ran
    assert out["cpu_s"] < LOOP_CPU_S, out["cpu_s"]
    return out["response"].json()["results"]


def test_a_field_limit_of_nested_boxes_does_not_stall_the_server(srv: ServerProcess) -> None:
    """2 MiB of nested ``\\boxed{`` with brace runs inside: each box's closing brace was
    searched for again from its opening one (16 boxes, then 8 more in the unboxing), tens of
    seconds of Python on the event loop."""
    cases = math_cases(FIELD_BYTES)
    names = ("nested boxes", "boxes over open braces", "boxes over escapes")
    items = [cases[name] for name in names]
    results = _check_live(_while_posting(srv, items))
    for name, result in zip(names, results, strict=True):
        assert result["score"] == 0.0 and result["correct"] is False, (name, result)


def test_a_question_of_unclosed_math_does_not_stall_the_server(srv: ServerProcess) -> None:
    """100,000 characters of ``\\(`` as the question: the span regex tried every opener
    against the whole rest of the text (37 s)."""
    cases = math_cases(FIELD_BYTES)
    names = [name for name in cases if name.startswith("question")]
    assert len(names) >= 3
    items = [cases[name] for name in names]
    assert all(len(item["question"]) <= QUESTION_CHARS for item in items)
    results = _check_live(_while_posting(srv, items))
    for name, result in zip(names, results, strict=True):
        assert result["score"] == 0.0 and result["correct"] is False, (name, result)


def test_every_worst_case_at_the_field_limit_in_one_request(srv: ServerProcess) -> None:
    """The whole table in one batch (the body limit allows it): every item a verdict of 0,
    and the server answers others throughout."""
    cases = math_cases(FIELD_BYTES)
    items = list(cases.values())
    started = time.monotonic()
    results = _check_live(_while_posting(srv, items))
    elapsed = time.monotonic() - started
    for name, result in zip(cases, results, strict=True):
        assert result["score"] == 0.0, (name, result)
    assert elapsed < 90, elapsed  # inside the client's 120 s timeout, with room to spare

