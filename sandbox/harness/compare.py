"""Comparing a program's output with the expected one, as the stdin/stdout datasets'
own judges do: line by line, trailing whitespace and trailing blank lines ignored, decimals
within a tolerance when the item gives one (integers stay exact)."""

from __future__ import annotations

import math


def lines_of(text):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def integer(token):
    """An integer token as (negative, digits without leading zeros), so two compare by value
    at any length (``int()`` refuses more than 4,300 digits); None for any other token."""
    sign, digits = (token[0], token[1:]) if token[:1] in ("+", "-") else ("", token)
    if not (digits.isdigit() and digits.isascii()):
        return None
    digits = digits.lstrip("0") or "0"
    return sign == "-" and digits != "0", digits


def tokens_match(expected, actual, tolerance):
    """Token by token: equal, or both numbers within ``tolerance`` (relative or absolute).
    Two integers compare exactly: the tolerance is for decimals (``1000001`` is not
    ``1000000`` at 1e-6)."""
    a, b = expected.split(), actual.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        ix, iy = integer(x), integer(y)
        if ix is not None and iy is not None:
            if ix != iy:
                return False
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not math.isclose(fx, fy, rel_tol=tolerance, abs_tol=tolerance):
            return False
    return True


def outputs_match(expected, actual, tolerance):
    """All lines, each with trailing whitespace trimmed; trailing blank lines ignored."""
    want, got = lines_of(expected), lines_of(actual)
    if len(want) != len(got):
        return False
    if tolerance is None:
        return want == got
    return all(tokens_match(w, g, tolerance) for w, g in zip(want, got))


def int_keys(value):
    """A dict whose keys are all integers written as JSON strings, with int keys (JSON cannot
    say ``{1: 2}``; APPS's harness undoes it the same way); anything else unchanged."""
    if not isinstance(value, dict):
        return value
    try:
        return {int(k): v for k, v in value.items()}
    except (TypeError, ValueError):
        return value


def call_output_matches(output, expected, exact=False):
    """A call-based test's verdict. ``exact`` (LiveCodeBench's ``grade_call_based``): a
    returned tuple is a list, then the value equals the expected one. Otherwise as APPS's
    ``testing_util.run_test`` decides (TACO's and verl's ``prime_code`` are copies of it): a
    returned tuple is a list; the value equals the expected one, or the expected one's only
    wrapper (``outputs`` are often ``[value]``), or, for a list of tuples, that wrapper as a
    list of lists; an expected dict's integer keys may be JSON strings. Stricter in two ways:
    both sides are plain data, so no object's own ``__eq__`` takes part; and the wrapper rule
    applies to a one-element list only (APPS takes ``expected[0]`` of any list, so returning
    the first element of a list answer — ``0`` for ``[0, 1]`` — passed: a red-team finding)."""
    if exact:
        return (list(output) if isinstance(output, tuple) else output) == expected
    expected = int_keys(expected)
    if isinstance(expected, list) and expected and isinstance(expected[0], dict):
        expected = [int_keys(expected[0]), *expected[1:]]
    if isinstance(output, tuple):
        output = list(output)
    if output == expected:
        return True
    if isinstance(expected, list) and len(expected) == 1:
        if output == expected[0]:
            return True
        if isinstance(output, list) and output and isinstance(output[0], tuple):
            return [list(x) for x in output] == expected[0]
    return False
