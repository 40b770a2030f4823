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
