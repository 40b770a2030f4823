"""Programs that got a code item a reward they did not earn, found by a red-team pass as a
GRPO policy and an attacker would look, through the real server and the real Docker engine.
Each was a strict xfail while the hack worked; each is fixed now and must stay fixed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers.code import verify_one

pytestmark = pytest.mark.usefixtures("docker_ready")


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
    result = verify_one(code_http, {
        "response": fenced(f"def sqrt_int(n):\n    {body}\n"), "test_code": EXPECTS_RAISE,
        "entry_point": "sqrt_int", "time_limit_s": 1})
    assert result["score"] == 0.0, result


def test_a_leetcode_solution_returning_the_first_element_fails(code_http: httpx.Client) -> None:
    wrong = "class Solution:\n    def twoSum(self, nums, target):\n        return 0\n"
    result = verify_one(code_http, {
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
    result = verify_one(code_http, {"response": fenced(solution), "test_code": test,
                                    "entry_point": "f"})
    assert result["score"] == 0.0, result


def test_a_bare_except_in_the_test_cannot_swallow_a_crash(code_http: httpx.Client) -> None:
    test = ("def check(candidate):\n    try:\n        candidate(-1)\n    except:\n"
            "        pass\n")
    result = verify_one(code_http, {
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
        result = verify_one(code_http, {"response": fenced(source), "test_code": test,
                                        "entry_point": "f"})
        assert result["score"] == score, result


# The solution writes its own reply frame on the candidate server's reply pipe (fd 4): an
# error whose class names are whatever it likes.
FORGE_ERROR = (
    "import json, os, struct\n"
    "def f(n):\n"
    "    body = json.dumps({'error': {'text': 'Forged: x', 'types': TYPES,\n"
    "                                 'value': {'l': [{'l': []}, {'d': []}]}}}).encode()\n"
    "    os.write(4, struct.pack('>I', len(body)) + body)\n"
    "    return True\n")


@pytest.mark.parametrize("types", [
    ["StopIteration"], ["StopAsyncIteration", "Exception"], ["KeyboardInterrupt"],
    ["SystemExit"], ["GeneratorExit"], ["BaseException"], ["os.system"], ["builtins.eval"],
    ["EndOfTests"], ["Stop"],
])
def test_a_forged_exception_class_cannot_end_the_tests_iteration_or_escape_it(
        code_http: httpx.Client, types: list[str]) -> None:
    """``all(map(f, ...))`` would pass if a call ended the map (StopIteration); a
    BaseException would pass an ``except Exception`` by and stop the harness. The setup's own
    classes are no way round: one that ends an iteration, or is no Exception, is refused too."""
    setup = "class EndOfTests(BaseException):\n    pass\n\nclass Stop(StopIteration):\n    pass\n"
    result = verify_one(code_http, {
        "response": fenced(FORGE_ERROR.replace("TYPES", repr(types))),
        "test_list": ["assert all(map(f, [1, 2]))"], "test_setup_code": setup})
    assert result["score"] == 0.0 and result["status"] == "ok", result
    assert result["tests"][0]["status"] == "runtime_error", result
    assert "RuntimeError" in result["tests"][0]["stderr"] or "Forged" in result["tests"][0][
        "stderr"], result


def test_a_solutions_class_named_after_a_builtin_origin_is_not_eval(
        code_http: httpx.Client) -> None:
    """An exception class that says it is ``builtins.eval`` is raised as its nearest builtin
    base; nothing is looked up by the name it gives."""
    solution = ("class Boom(KeyError):\n    pass\n"
                "Boom.__module__, Boom.__qualname__ = 'builtins', 'eval'\n"
                "def f(n):\n    raise Boom('__import__(\"os\").getuid()')\n")
    test = ("def check(candidate):\n    try:\n        candidate(1)\n"
            "    except KeyError as e:\n        assert type(e) is KeyError, type(e)\n")
    result = verify_one(code_http, {"response": fenced(solution), "test_code": test,
                                    "entry_point": "f"})
    assert result["score"] == 1.0, result


# --- objects of the test setup's classes -------------------------------------------------------

NODE_SETUP = (
    "class Node:\n    def __init__(self, val, left=None, right=None):\n"
    "        self.val, self.left, self.right = val, left, right\n"
    "    def __eq__(self, other):\n        return isinstance(other, Node) and (\n"
    "            self.val, self.left, self.right) == (other.val, other.left, other.right)\n"
    "    def size(self):\n        return 1\n\n"
    "class Oops(ValueError):\n    pass\n\nTREE = Node(2, Node(1), Node(3))\n")
# The solution writes its reply frame itself: a value whose objects say whatever it likes.
FORGE_VALUE = (
    "import json, os, struct\n"
    "def f(tree):\n"
    "    body = json.dumps({'value': VALUE}).encode()\n"
    "    os.write(4, struct.pack('>I', len(body)) + body)\n"
    "    return tree\n")


@pytest.mark.parametrize("value", [
    "{'g': [{'o': 0}, [['Yes', []]]]}",  # a class the setup does not define
    "{'g': [{'o': 0}, [['Oops', []]]]}",  # the setup's, but an exception
    "{'g': [{'o': 0}, [['int', []]]]}",
    "{'g': [{'o': 0}, [['Node', [['size', {'i': '1'}]]]]]}",  # shadows its method
    "{'g': [{'o': 0}, [['Node', [['__class__', None]]]]]}",
    "{'g': [{'o': 0}, [['Node', [['a%d' % i, None] for i in range(100000)]]]]}",
    "{'g': [{'o': 0}, [['Node', []]] * 200000]}",
    "{'g': [{'o': 5}, [['Node', []]]]}",
], ids=["not-in-setup", "exception-class", "builtin", "shadows-method", "dunder",
        "attribute-bomb", "object-bomb", "bad-index"])
def test_a_forged_object_fails_its_test(code_http: httpx.Client, value: str) -> None:
    result = verify_one(code_http, {
        "response": fenced(FORGE_VALUE.replace("VALUE", value)), "test_setup_code": NODE_SETUP,
        "test_list": ["assert f(TREE) == TREE"]})
    assert result["score"] == 0.0 and result["status"] == "ok", result
    assert result["tests"][0]["status"] == "runtime_error", result


@pytest.mark.parametrize("solution", [
    # its own Node, named as the setup's, whose == is always True: it crosses as the setup's
    "class Node:\n    def __init__(self, val):\n        self.val = val\n"
    "    def __eq__(self, other):\n        return True\n"
    "def f(tree):\n    return Node(0)\n",
    # another class renamed after the setup's
    "class Yes:\n    def __eq__(self, other):\n        return True\n"
    "Yes.__name__ = Yes.__qualname__ = 'Node'\ndef f(tree):\n    return Yes()\n",
    # the setup's own class, with 100,000 attributes
    "def f(tree):\n    n = Node(0)\n    for i in range(100000):\n        setattr(n, f'a{i}', i)\n"
    "    return n\n",
    # a cycle into the setup's recursive ==
    "def f(tree):\n    n = Node(2)\n    n.left = n.right = n\n    return n\n",
], ids=["own-class-always-equal", "renamed-class", "attribute-bomb", "cycle"])
def test_the_setups_objects_cannot_be_faked_or_used_to_stall(code_http: httpx.Client,
                                                            solution: str) -> None:
    result = verify_one(code_http, {"response": fenced(solution), "test_setup_code": NODE_SETUP,
                                    "test_list": ["assert f(TREE) == TREE"]})
    assert result["score"] == 0.0 and result["status"] == "ok", result
    assert result["tests"][0]["status"] in ("wrong_answer", "runtime_error"), result


# Call-based tests run the solution after APPS's import preamble (``from math import *``,
# ``from operator import *``, ...): the stdlib function of the tested name was called when the
# solution defined none, or only a method of that name.
STDLIB_NAMED = [
    ("add", [([1, 2], 3), ([10, -4], 6)], "list"),
    ("add", [([1, 2], 3), ([10, -4], 6)], "lines"),
    ("gcd", [([12, 8], 4), ([7, 21], 7)], "list"),
    ("factorial", [([5], 120), ([3], 6)], "list"),
    ("median", [([[1, 5, 3]], 3), ([[2, 9, 4]], 4)], "list"),
    ("sum", [([[1, 2, 3]], 6), ([[4, 5]], 9)], "list"),
]


def call_item(fn_name: str, rows: list, call_input: str, response: str) -> dict[str, Any]:
    if call_input == "lines":
        tests = [{"input": "\n".join(map(str, args)), "output": str(out)} for args, out in rows]
        return {"response": response, "fn_name": fn_name, "tests": tests,
                "call_input": "lines"}
    return {"response": response, "fn_name": fn_name,
            "tests": [{"input": str(args), "output": f"[{out}]"} for args, out in rows]}


@pytest.mark.parametrize(("fn_name", "rows", "call_input"), STDLIB_NAMED,
                         ids=[f"{n}-{c}" for n, _, c in STDLIB_NAMED])
def test_a_call_based_solution_that_defines_nothing_is_not_the_stdlibs_function(
        code_http: httpx.Client, fn_name: str, rows: list, call_input: str) -> None:
    result = verify_one(code_http, call_item(fn_name, rows, call_input, "pass"))
    assert result["score"] == 0.0, result


def test_a_solutions_method_is_called_not_the_stdlib_function_of_its_name(
        code_http: httpx.Client) -> None:
    rows = [([12, 8], 4), ([7, 21], 7)]
    wrong = "class Solution:\n    def gcd(self, a, b):\n        return 0\n"
    right = ("class Solution:\n    def gcd(self, a, b):\n"
             "        while b:\n            a, b = b, a % b\n        return a\n")
    own = "def gcd(a, b):\n    return a if b == 0 else gcd(b, a % b)\n"
    imported = "from math import gcd\n"  # the solution's own choice of function
    for response, score in ((wrong, 0.0), (right, 1.0), (own, 1.0), (imported, 1.0)):
        result = verify_one(code_http, call_item("gcd", rows, "list", response))
        assert result["score"] == score, (response, result)


# LeetCodeDataset's prompt star-imports math, operator, ... into the solution's module: the
# same hole in the assertion path.
STAR_PROMPT = "from math import *\nfrom operator import *\n"


@pytest.mark.parametrize("response", [
    "pass",
    "class Solution:\n    def gcd(self, a, b):\n        return 0\n",
], ids=["nothing", "wrong-method"])
def test_an_assertion_tests_entry_point_is_not_a_star_imported_function(
        code_http: httpx.Client, response: str) -> None:
    check = "def check(candidate):\n    assert candidate(12, 8) == 4\n    assert candidate(7, 21) == 7\n"
    result = verify_one(code_http, {"response": response, "prompt": STAR_PROMPT, "test_code": check,
                                    "entry_point": "Solution().gcd"})
    assert result["score"] == 0.0, result
    result = verify_one(code_http, {"response": "pass", "prompt": STAR_PROMPT, "test_code": check,
                                    "entry_point": "gcd"})
    assert result["score"] == 0.0, result


def test_a_solution_still_uses_what_it_star_imports(code_http: httpx.Client) -> None:
    """The star-imported names stay the solution's to use, and the tests' (MBPP's one module)."""
    solution = "from math import *\ndef hyp(a, b):\n    return int(sqrt(a * a + b * b))\n"
    result = verify_one(code_http, {"response": fenced(solution),
                                    "test_list": ["assert hyp(3, 4) == 5", "assert floor(2.5) == 2"]})
    assert result["score"] == 1.0, result
    leet = ("class Solution:\n    def hyp(self, a: int, b: int) -> List[int]:\n"
            "        return [int(sqrt(a * a + b * b))]\n")
    result = verify_one(code_http, call_item("hyp", [([3, 4], [5])], "list", leet))
    assert result["score"] == 1.0, result
