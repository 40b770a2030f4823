"""Which statements of a dataset's assertion code are its tests, and so how many tests a job
has: the harness runs by this rule and the host counts by it (it imports this module), so the
total a result reports and the verdicts the harness writes come from one reading. Standard
library only (it runs in the image too)."""

from __future__ import annotations

import ast

CHECK = "check"  # HumanEval's check(candidate): the whole suite is one test


def defines_check(tree):
    return any(isinstance(n, ast.FunctionDef) and n.name == CHECK for n in tree.body)


def split_tests(test_code):
    """(setup statements, tests): each top-level ``assert`` is one test; a ``check`` function
    makes the whole suite one test, called with the candidate. Raises what ``ast.parse``
    raises."""
    tree = ast.parse(test_code, "test_code")
    if defines_check(tree):
        return tree.body, [CHECK]
    setup = [n for n in tree.body if not isinstance(n, ast.Assert)]
    asserts = [n for n in tree.body if isinstance(n, ast.Assert)]
    return setup, asserts


def count_assertion_tests(test_code):
    """How many tests the harness reports for ``test_code``; 1 for code it cannot run (it
    answers ``bad_tests`` for that, with no test at all)."""
    try:
        return max(1, len(split_tests(test_code)[1]))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return 1


def count_tests(calls=None, test_code=None, tests=()):
    """A job's number of tests, whichever form they come in (calls, assertion code, or
    stdin/stdout cases)."""
    if calls is not None:
        return len(calls)
    if test_code is not None:
        return count_assertion_tests(test_code)
    return len(tests)
