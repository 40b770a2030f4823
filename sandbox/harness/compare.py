"""Comparing a program's output with the expected one, as the stdin/stdout datasets'
own judges do: line by line, trailing whitespace and trailing blank lines ignored, numbers
within a tolerance when the item gives one."""

from __future__ import annotations

import math


def lines_of(text):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def tokens_match(expected, actual, tolerance):
    a, b = expected.split(), actual.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
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


def call_output_matches(output, expected):
    """A call-based test's verdict, as APPS's ``testing_util.run_test`` (and TACO's and
    PrimeIntellect's copies of it) decides: a returned tuple is a list; the value equals the
    expected one, or the expected one's only wrapper (``outputs`` are often ``[value]``), or,
    for a list of tuples, that wrapper as a list of lists. Stricter in one way only: both
    sides are plain data, so no object's own ``__eq__`` takes part."""
    if isinstance(output, tuple):
        output = list(output)
    if output == expected:
        return True
    if isinstance(expected, list) and expected:
        if output == expected[0]:
            return True
        if isinstance(output, list) and output and isinstance(output[0], tuple):
            return [list(x) for x in output] == expected[0]
    return False
