"""The code verifier through the real server and the real Docker engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from tests.conftest import SandboxRuntime, wait_for_sandbox
from tests.helpers.code import code_client, code_server, verify

# what the server does around the sandbox: under gVisor too only where marked isolation
pytestmark = [pytest.mark.usefixtures("docker_ready"), pytest.mark.host_side]


@pytest.fixture(scope="module")
def code_http(request: pytest.FixtureRequest, sandbox_runtime: SandboxRuntime,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The shared server (runc), as tests/sandbox/conftest.py's ``code_http``, or one whose
    sandbox runs under gVisor: this module's tests run under both."""
    with ExitStack() as stack:
        if sandbox_runtime.docker_host is None:
            server = request.getfixturevalue("server")
            wait_for_sandbox(server.url, timeout_s=180)
        else:
            server = stack.enter_context(code_server(
                tmp_path_factory.mktemp(f"code-{sandbox_runtime.name}"), env=sandbox_runtime.env))
        yield stack.enter_context(code_client(server))


SUM_TESTS = [{"input": "1 2\n", "output": "3\n"}, {"input": "10 -4", "output": "6"}]

# Every language's sum-of-two-numbers program, compile error and hostile programs:
# tests/sandbox/test_languages.py.


def test_partial_score_and_all_or_nothing(code_http: httpx.Client) -> None:
    program = "```python\nprint(3)\n```"
    partial, strict = verify(
        code_http,
        {"response": program, "tests": SUM_TESTS},
        {"response": program, "tests": SUM_TESTS, "all_or_nothing": True},
    )
    assert (partial["score"], partial["passed"], partial["total"]) == (0.5, 1, 2)
    assert [t["status"] for t in partial["tests"]] == ["passed", "wrong_answer"]
    assert strict["score"] == 0.0


@pytest.mark.parametrize(
    ("printed", "expected", "passes"),
    [
        ("1\\n2", "1\n2", True),
        ("1   \\n2\\t", "1\n2\n", True),  # trailing whitespace trimmed
        ("1\\n2\\n\\n", "1\n2", True),  # trailing blank lines ignored
        ("1", "1\n2", False),  # a missing line fails
        ("1\\n2\\n3", "1\n2", False),  # an extra line fails
        ("1 2", "1  2", True),  # inner spacing does not count (each line's tokens)
        ("2\\n1", "1\n2", False),
    ],
)
def test_line_by_line_comparison(code_http: httpx.Client, printed: str, expected: str,
                                 passes: bool) -> None:
    (result,) = verify(code_http, {"response": f"print('{printed}', end='')",
                                   "tests": [{"input": "", "output": expected}]})
    assert result["tests"][0]["status"] == ("passed" if passes else "wrong_answer")


def test_float_tolerance(code_http: httpx.Client) -> None:
    item = {"response": "print(0.3333333, 2)", "tests": [{"output": "0.33333 2"}]}
    loose, exact = verify(code_http, {**item, "tolerance": 1e-4}, item)
    assert loose["score"] == 1.0 and exact["score"] == 0.0


def test_assertions_bare_asserts_count_one_test_each(code_http: httpx.Client) -> None:
    (result,) = verify(code_http, {
        "response": "```python\ndef add(a, b):\n    return a + b\n```",
        "test_code": "import math\nassert add(1, 2) == 3\nx = 5\nassert add(x, 1) == 6\n"
                     "assert add(2, 2) == 5",
        "entry_point": "add",
    })
    assert (result["passed"], result["total"]) == (2, 3)
    assert [t["status"] for t in result["tests"]] == ["passed", "passed", "wrong_answer"]


def test_assertions_check_function(code_http: httpx.Client) -> None:
    test_code = ("METADATA = {}\n\ndef check(candidate):\n    assert candidate([3, 1, 2]) == "
                 "[1, 2, 3]\n    assert candidate([]) == []\n")
    good, bad = verify(
        code_http,
        {"response": "def sort_list(xs):\n    return sorted(xs)", "test_code": test_code,
         "entry_point": "sort_list"},
        {"response": "def sort_list(xs):\n    return xs", "test_code": test_code,
         "entry_point": "sort_list"},
    )
    assert (good["score"], good["total"]) == (1.0, 1)
    assert bad["score"] == 0.0 and bad["tests"][0]["status"] == "wrong_answer"


def test_runtime_error_and_missing_entry_point(code_http: httpx.Client) -> None:
    raises, missing = verify(
        code_http,
        {"response": "def f(x):\n    return 1 / 0", "test_code": "assert f(1) == 1",
         "entry_point": "f"},
        {"response": "def g(x):\n    return x", "test_code": "assert f(1) == 1",
         "entry_point": "f"},
    )
    assert raises["tests"][0]["status"] == "runtime_error"
    assert "ZeroDivisionError" in raises["tests"][0]["stderr"]
    assert missing["tests"][0]["status"] == "runtime_error"
    assert "defines no function 'f'" in missing["tests"][0]["stderr"]


def test_statuses_no_code_syntax_compile(code_http: httpx.Client) -> None:
    no_code, syntax, compile_error, stdio_crash = verify(
        code_http,
        {"response": "```python\n```", "tests": SUM_TESTS},
        {"response": "```python\ndef f(:\n```", "tests": SUM_TESTS},
        {"response": "```cpp\nint main( {\n```", "language": "cpp", "tests": SUM_TESTS},
        {"response": "raise SystemExit(3)", "tests": SUM_TESTS},
    )
    assert (no_code["status"], no_code["score"]) == ("no_code", 0.0)
    assert (syntax["status"], syntax["score"], syntax["total"]) == ("syntax_error", 0.0, 2)
    assert "SyntaxError" in syntax["detail"]
    assert (compile_error["status"], compile_error["score"]) == ("compile_error", 0.0)
    assert "error" in compile_error["detail"]
    assert [t["status"] for t in stdio_crash["tests"]] == ["runtime_error"] * 2


def test_whole_response_when_no_fence(code_http: httpx.Client) -> None:
    (result,) = verify(code_http, {"response": "print(int(input()) * 2)",
                                   "tests": [{"input": "21", "output": "42"}]})
    assert result["score"] == 1.0


def test_time_limit_is_clamped_to_the_server_maximum(code_http: httpx.Client) -> None:
    (result,) = verify(code_http, {"response": "import time\ntime.sleep(1.5)\nprint(1)",
                                   "tests": [{"output": "1"}], "time_limit_s": 0.5})
    assert result["tests"][0]["status"] == "timeout"


def test_mixed_batch_with_math(code_http: httpx.Client) -> None:
    r = code_http.post("/v1/rewards", json={"items": [
        {"verifier": "math", "response": "\\boxed{4}", "answer": "4"},
        {"verifier": "code", "response": "print(4)", "tests": [{"output": "4"}]},
        {"verifier": "code", "response": "print(5)", "tests": [{"output": "4"}]},
    ]})
    assert r.status_code == 200
    assert r.json()["rewards"] == [1.0, 1.0, 0.0]


def test_parallel_batch(code_http: httpx.Client) -> None:
    items = [{"response": f"import time\ntime.sleep(0.3)\nprint({i})",
              "tests": [{"output": str(i)}]} for i in range(6)]
    results = verify(code_http, *items)
    assert [r["score"] for r in results] == [1.0] * 6


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ({"response": "x", "language": "cobol", "tests": [{"output": ""}]},
         "unknown language 'cobol'; known: python (py, python3), cpp (c++, cxx), c, java"),
        ({"response": "x"}, "give one of 'tests'"),
        ({"response": "x", "tests": [{"output": ""}], "test_code": "assert 1"},
         "got tests, test_code"),
        ({"response": "x", "test_code": "def check(candidate):\n    assert candidate(1)"},
         "'entry_point'"),
        ({"response": "x", "test_code": "assert f(1)", "entry_point": "1f"},
         "'entry_point' must be a Python identifier"),
        ({"response": "x", "fn_name": "f", "tests": [{"input": "[1,", "output": "2"}]},
         "tests[0].input is not JSON"),
        ({"response": "x", "fn_name": "f", "tests": [{"input": "5", "output": "5"}]},
         "tests[0].input must be the JSON list of arguments"),
        ({"response": "x", "fn_name": "f", "tests": [{"input": "[]", "output": "{"}]},
         "tests[0].output is not JSON"),
        ({"response": "x", "tests": [{"input": "1", "output": 1}]},
         "tests[0]: 'input' and 'output' are text"),
        ({"response": "x", "tests": [{"output": "1"}], "test_setup": "import math"},
         "'test_setup' goes with"),
        ({"response": "x", "test_list": ["assert f(1)"], "test_setup": "a = 1",
          "test_setup_code": "b = 2"}, "not both"),
        ({"response": "x", "test_code": "assert f(1)", "challenge_test_list": ["assert f(2)"]},
         "'challenge_test_list' goes with 'test_list'"),
        ({"response": "x", "test_list": []}, "'test_list' is empty"),
        ({"response": "x", "test_list": ["assert f(1)"], "call_input": "lines"},
         "'call_input' goes with 'fn_name'"),
        ({"response": "x", "fn_name": "f", "call_input": "lines",
          "tests": [{"input": "1\n[2", "output": "3"}]}, "tests[0].input line 2 is not JSON"),
        ({"response": "x", "language": "cpp", "fn_name": "f",
          "tests": [{"input": "[]", "output": "1"}]}, "python only"),
        ({"response": "x", "language": "cpp", "test_code": "assert f()", "entry_point": "f"},
         "python only"),
        ({"response": "x", "tests": []}, "'tests' is empty"),
        ({"response": "x", "tests": [{"output": ""}], "time_limit_s": -1}, "time_limit_s"),
    ],
)
def test_bad_items(code_http: httpx.Client, item: dict[str, Any], fragment: str) -> None:
    r = code_http.post("/v1/verify/code?on_invalid=error", json={"items": [item]})
    assert r.status_code == 422
    assert fragment in r.json()["detail"]
