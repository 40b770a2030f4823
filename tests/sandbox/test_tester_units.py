"""PID 1's side of an assertion job's tester (``harness/tester.py``), without a container:
the relay answers the tester's requests, keeps the job's one turn whatever the test code
sends, and refuses any request it does not know; a result is kept to a result's shape; a
tester that ends without one is the test code's null before the solution started, the
solution's 0 after."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from sandbox.harness import tester
from sandbox.harness.protocol import recv_frame, send_frame
from sandbox.harness.statuses import BAD_TESTS, OK


def job(**extra: Any) -> dict[str, Any]:
    now = time.monotonic()
    return {"started": now, "deadline": now + 30, "yield_at": None, "yield_after_s": None,
            "time_limit_s": 1.0, **extra}


def relay(job_: dict[str, Any], requests: list[dict[str, Any]]
          ) -> tuple[Any, bool, list[Any]]:
    """``requests`` sent by a fake tester (each answered request's reply collected), then
    its result; what ``_relay`` made of it."""
    ours, theirs = socket.socketpair()
    replies: list[Any] = []

    def fake_tester() -> None:
        try:
            for request in requests:
                send_frame(theirs.fileno(), request)
                if request.get("op") == "kill":
                    replies.append(recv_frame(theirs.fileno(), time.monotonic() + 10))
            send_frame(theirs.fileno(), {"result": {"status": OK, "tests": []}})
        except OSError:
            pass  # PID 1 hung up on it

    thread = threading.Thread(target=fake_tester)
    thread.start()
    try:
        result, from_tester = tester._relay(ours.fileno(), job_)
    finally:
        ours.close()
        thread.join(10)
        theirs.close()
    return result, from_tester, replies


def test_a_tester_cannot_ask_for_more_time_its_job_has_one_turn() -> None:
    """There is nothing to ask the host: a request to run on past the turn (what a split job
    once sent) is not one PID 1 serves. Before the solution started, that is the test
    code's null."""
    result, from_tester, _ = relay(job(unsplit_s=5.0), [{"op": "ask"}])
    assert not from_tester and result["status"] == BAD_TESTS, result
    assert "unknown request" in result["detail"]


def test_a_tester_past_its_turn_is_stopped_by_pid_1_whatever_its_own_clocks_say() -> None:
    """Test code that stops its own clock and loops: PID 1 gives up at the turn's end plus
    the grace, long before the job's budget (30 s here), and the tester's late result is
    not taken."""
    ours, theirs = socket.socketpair()
    gone = threading.Event()

    def stuck_tester() -> None:
        send_frame(theirs.fileno(), {"op": "started"})
        gone.wait(30)
        try:
            send_frame(theirs.fileno(), {"result": {"status": OK, "tests": []}})
        except OSError:
            pass

    thread = threading.Thread(target=stuck_tester)
    thread.start()
    try:
        result, from_tester = tester._relay(ours.fileno(), job(unsplit_s=0.2))
    finally:
        gone.set()
        thread.join(10)
        ours.close()
        theirs.close()
    assert not from_tester and result["candidate_failed"] is True, result


@pytest.mark.parametrize(("result", "why"), [
    ("passed", "malformed result"),
    ({"status": "ok", "dirty": False}, "malformed result"),
    ({"status": "sandbox_unavailable"}, "malformed result"),
    ({"status": "ok", "tests": [{"status": "great"}]}, "malformed tests"),
    ({"status": "ok", "tests": [{"status": "passed", "time_ms": "0"}]}, "malformed tests"),
    ({"status": "ok", "tests": [{"status": "passed", "extra": 1}]}, "malformed tests"),
])
def test_a_result_not_of_a_results_shape_is_the_test_codes_null(result: Any, why: str) -> None:
    out = tester.checked(result)
    assert out["status"] == BAD_TESTS and why in out["detail"]


def test_a_harness_error_from_the_tester_is_the_test_codes_null_not_a_retry() -> None:
    out = tester.checked({"status": "harness_error", "detail": "says who"})
    assert out == {"status": BAD_TESTS, "detail": "says who"}


def test_a_result_keeps_its_shape_and_cannot_say_it_yielded() -> None:
    out = tester.checked({"status": "ok", "tests": [{"status": "passed", "time_ms": 1.0,
                                                     "stderr": ""}]})
    assert out == {"status": "ok", "tests": [{"status": "passed", "time_ms": 1.0,
                                              "stderr": ""}]}
    # an assertion job has one turn: a result that says otherwise is not a result
    assert tester.checked({"status": "ok", "tests": [], "yielded": True})["status"] == BAD_TESTS


def test_a_tester_gone_without_a_result_is_null_before_the_solution_and_0_after() -> None:
    ours, theirs = socket.socketpair()
    theirs.close()
    before, _ = tester._relay(ours.fileno(), job())
    assert before["status"] == BAD_TESTS
    ours.close()
    ours, theirs = socket.socketpair()
    send_frame(theirs.fileno(), {"op": "started"})
    theirs.close()
    after, _ = tester._relay(ours.fileno(), job())
    ours.close()
    assert after["status"] == OK and after["candidate_failed"] is True and after["tests"] == []
