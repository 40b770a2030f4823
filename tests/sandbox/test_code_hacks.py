"""Programs that get a code item a reward they did not earn, found by the red-team audit
(/work/briefs/code_hack_audit_result.md), through the real server and the real Docker engine.
Each is a strict xfail: it fails while the hack works, and turns into an XPASS (a failure)
the day a fix lands, so the fix must remove the marker."""

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


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "the proxy's CandidateCrashed and CandidateTimeout are Exception subclasses: a test's own "
    "'except Exception' swallows them, so a solution that kills its process or hangs passes "
    "a test that expects it to raise"))
@pytest.mark.parametrize("body", ["import os\n    os._exit(0)", "while True:\n        pass"],
                         ids=["exits", "hangs"])
def test_a_dead_or_hung_solution_does_not_pass_an_expects_raise_test(
        code_http: httpx.Client, body: str) -> None:
    result = verify(code_http, {
        "response": fenced(f"def sqrt_int(n):\n    {body}\n"), "test_code": EXPECTS_RAISE,
        "entry_point": "sqrt_int", "time_limit_s": 1})
    assert result["score"] == 0.0, result


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "call-based items default to APPS's comparison, which also accepts the expected value's "
    "first element (the '[value]' wrapper rule): on a LeetCode 'class Solution' row whose "
    "answer is a list, a constant first element passes"))
def test_a_leetcode_solution_returning_the_first_element_fails(code_http: httpx.Client) -> None:
    wrong = "class Solution:\n    def twoSum(self, nums, target):\n        return 0\n"
    result = verify(code_http, {
        "response": fenced(wrong), "fn_name": "twoSum",
        "tests": [{"input": "[[2, 7, 11, 15], 9]", "output": "[0, 1]"}]})
    assert result["score"] == 0.0, result


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "the trusted process binds a solution's name to its own copy of whatever the solution's "
    "function claims to be (__module__ 'builtins', __qualname__ 'eval'), so a test that "
    "checks the solution's result with a helper from the prompt (HumanEval/32 calls the "
    "solution's poly) evaluates the solution's string as root in the harness: a forged pass, "
    "and root can patch the harness's comparison for every later execution in that container"))
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
