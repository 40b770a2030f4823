"""Programs that got a code item a reward they did not earn, found by a red-team pass as a
GRPO policy and an attacker would look, through the real server and the real Docker engine.
Each was a strict xfail while the hack worked; each is fixed now and must stay fixed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.usefixtures("docker_ready")


@pytest.fixture(scope="module")
def code_http(server: Any) -> httpx.Client:
    from tests.conftest import wait_for_sandbox

    wait_for_sandbox(server.url, timeout_s=180)
    return httpx.Client(base_url=server.url, timeout=600)


def verify(http: httpx.Client, item: dict[str, Any]) -> dict[str, Any]:
    r = http.post("/v1/verify/code", json={"items": [item]})
    assert r.status_code == 200, r.text
    return r.json()["results"][0]


def fenced(source: str) -> str:
    return f"```python\n{source}\n```"


# A test that expects the solution to raise, written the common way (catch Exception).
EXPECTS_RAISE = (
    "def check(candidate):\n"
    "    try:\n"
    "        candidate(-1)\n"
    "    except Exception:\n"
    "        pass\n"
    "    else:\n"
    "        raise AssertionError('no exception for a negative input')\n"
)


@pytest.mark.parametrize("body", ["import os\n    os._exit(0)", "while True:\n        pass"],
                         ids=["exits", "hangs"])
def test_a_dead_or_hung_solution_does_not_pass_an_expects_raise_test(
        code_http: httpx.Client, body: str) -> None:
    result = verify(code_http, {
        "response": fenced(f"def sqrt_int(n):\n    {body}\n"), "test_code": EXPECTS_RAISE,
        "entry_point": "sqrt_int", "time_limit_s": 1})
    assert result["score"] == 0.0, result


def test_a_leetcode_solution_returning_the_first_element_fails(code_http: httpx.Client) -> None:
    wrong = "class Solution:\n    def twoSum(self, nums, target):\n        return 0\n"
    result = verify(code_http, {
        "response": fenced(wrong), "fn_name": "twoSum",
        "tests": [{"input": "[[2, 7, 11, 15], 9]", "output": "[0, 1]"}]})
    assert result["score"] == 0.0, result


def test_a_solution_cannot_bind_its_names_to_the_trusted_processs_builtins(
        code_http: httpx.Client) -> None:
    solution = (
        "def is_valid(r):\n    return False\n"
        "is_valid.__module__ = 'builtins'\nis_valid.__qualname__ = 'eval'\n"
        "def f(n):\n    return \"__import__('os').getuid() == 0\"\n")
    test = "def check(candidate):\n    assert is_valid(candidate(3))\n"
    result = verify(code_http, {"response": fenced(solution), "test_code": test,
                                "entry_point": "f"})
    assert result["score"] == 0.0, result


def test_a_bare_except_in_the_test_cannot_swallow_a_crash(code_http: httpx.Client) -> None:
    test = ("def check(candidate):\n    try:\n        candidate(-1)\n    except:\n"
            "        pass\n")
    result = verify(code_http, {
        "response": fenced("def f(n):\n    import os\n    os._exit(0)\n"),
        "test_code": test, "entry_point": "f", "time_limit_s": 1})
    assert result["score"] == 0.0 and result["tests"][0]["status"] == "runtime_error", result


def test_a_correct_solution_raises_what_the_test_expects(code_http: httpx.Client) -> None:
    """The solution's ValueError reaches the test as a ValueError (it was a RuntimeError,
    which failed a correct solution against ``except ValueError``)."""
    test = ("def check(candidate):\n    try:\n        candidate(-1)\n"
            "    except ValueError as e:\n        assert 'negative' in str(e)\n"
            "    else:\n        raise AssertionError('no ValueError')\n")
    right = "def f(n):\n    if n < 0:\n        raise ValueError('negative input')\n    return n\n"
    wrong = "def f(n):\n    if n < 0:\n        raise KeyError('negative input')\n    return n\n"
    for source, score in ((right, 1.0), (wrong, 0.0)):
        result = verify(code_http, {"response": fenced(source), "test_code": test,
                                    "entry_point": "f"})
        assert result["score"] == score, result
