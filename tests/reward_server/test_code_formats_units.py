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
