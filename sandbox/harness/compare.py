"""Comparing a program's output with the expected one, as the datasets' own graders do.

A stdin/stdout item names its dataset's comparison (``compare``, one of ``MODES``):

- ``lines`` (the default; CodeContests, Codeforces, TACO): line by line, each line's
  whitespace-separated tokens equal, trailing blank lines ignored; with a ``tolerance``, two
  decimal tokens within it (absolute or relative).
- ``tokens``: the whole output as one sequence of tokens (testlib's ``wcmp``): line breaks
  are whitespace like any other; ``tolerance`` as above.
- ``apps``: APPS's ``testing_util.run_test``: every line stripped at both ends, blank lines
  dropped, each line's whitespace-separated tokens equal (``1\t2`` is ``1 2``); or, every line
  one number, the numbers as close as ``np.allclose`` (relative 1e-5, absolute 1e-8). APPS
  reads a line's tokens only in its last resorts, which compare the lines' token *sets* as a
  set: each line's tokens in order, as here, is the part of those that is not a hack (lines
  in any order, tokens in any order and lost repeats passed there).
- ``lcb``: LiveCodeBench's ``grade_stdio``: the whole output stripped, then each line stripped,
  as many lines, each equal or its tokens equal as ``Decimal`` values (``1.0`` is ``1``).

Without a tolerance, ``lines`` and ``tokens`` compare tokens as text, as testlib's ``wcmp``
does (``007`` is not ``7``, ``1.0`` is not ``1``). Where numbers compare by value (a
tolerance, ``apps``' numeric lines, ``lcb``), an expected integer is exact at any length: a
printed token whose value is an integer is compared with it exactly, however written
(``1000000000001``, ``1000000000001.0`` and ``1.000001e12`` are not ``1000000000000`` at 1e-6;
``007`` is ``7``). A printed decimal with a fraction against an integer is a real answer the
jury printed without a point (C++'s ``cout`` prints 2.0 as ``2``): within the tolerance, as
testlib's real-number checkers read it.

Outputs may be megabytes (``output_limit_bytes``): the comparisons walk both texts line by line
and token by token instead of splitting them into lists, so what they hold beside the two texts
is one line's worth at most."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from itertools import zip_longest

MODES = ("lines", "tokens", "apps", "lcb")
_TOKEN = re.compile(r"\S+")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_SHORT = 1 << 16  # a line shorter than this is split whole (a list); a longer one is walked
# np.allclose's defaults, which APPS's testing_util compares numeric lines with
APPS_RTOL, APPS_ATOL = 1e-5, 1e-8


def lines(text):
    """The lines of ``text`` split on ``\\n`` (a ``\\r`` before it is whitespace), one at a
    time."""
    start = 0
    while True:
        end = text.find("\n", start)
        if end < 0:
            yield text[start:]
            return
        yield text[start:end]
        start = end + 1


def tokens(text):
    if len(text) < _SHORT:
        return iter(text.split())
    return (m.group() for m in _TOKEN.finditer(text))


def decimal(token):
    """The token's exact value, or None when it is not a number."""
    if not _NUMBER.fullmatch(token):
        return None
    try:
        return Decimal(token)
    except (InvalidOperation, ValueError):
        return None


def integral(value):
    """Whether a finite Decimal is an integer (``1e12``, ``5.0``), read from its digits: no
    context, so no rounding and no exponent too large for one."""
    _, digits, exponent = value.as_tuple()
    return isinstance(exponent, int) and (exponent >= 0 or not any(digits[exponent:]))


def integer_exact(want, a, b):
    """None, or the verdict when the expected token ``want`` (value ``a``) is an integer and
    the printed value ``b`` is integral: the two integers, exactly (a float's ``1e12`` or
    ``1000000000001.0`` does not pass for ``1000000000000`` by closeness)."""
    if _INTEGER.fullmatch(want) and integral(b):
        return a == b
    return None


def tokens_match(want, got, tolerance):
    """Two tokens: equal; or, under a ``tolerance``, both numbers: an expected integer exact
    against an integral value (``integer_exact``), else within the tolerance."""
    if want == got:
        return True
    if tolerance is None:
        return False
    return numbers_close(want, got, lambda a, b: math.isclose(a, b, rel_tol=tolerance,
                                                                abs_tol=tolerance))


def numbers_close(want, got, close):
    """Two number tokens: an expected integer exact against an integral value
    (``integer_exact``), else ``close(want, got)`` on their float values; text that is no
    number is not close."""
    a, b = decimal(want), decimal(got)
    if a is None or b is None:
        return False
    exact = integer_exact(want, a, b)
    return exact if exact is not None else close(float(a), float(b))


def sequences_match(want, got, tolerance):
    """Two token iterators, pairwise, to the end of both."""
    end = object()
    return all(w is not end and g is not end and tokens_match(w, g, tolerance)
               for w, g in zip_longest(want, got, fillvalue=end))


def lines_match(expected, actual, tolerance):
    """``lines``: each line's tokens; a line missing at the end counts as a blank one."""
    return all(sequences_match(tokens(w), tokens(g), tolerance)
               for w, g in zip_longest(lines(expected), lines(actual), fillvalue=""))


def stripped_lines(text):
    """The lines of ``text`` stripped at both ends, blank ones left out (APPS's reading)."""
    return (line for line in map(str.strip, lines(text)) if line)


def apps_match(expected, actual):
    """``apps``: stripped non-blank lines, each one's tokens equal; or each line one number
    and all of them close."""
    end = object()
    if all(w is not end and g is not end
           and (w == g or sequences_match(tokens(w), tokens(g), None))
           for w, g in zip_longest(stripped_lines(expected), stripped_lines(actual),
                                   fillvalue=end)):
        return True
    return all(w is not end and g is not end and apps_numbers_close(w, g)
               for w, g in zip_longest(stripped_lines(expected), stripped_lines(actual),
                                       fillvalue=end))


def apps_numbers_close(want, got):
    """One line each, each one number: APPS's ``np.allclose`` rule, |got - want| <= atol +
    rtol * |want|, except that an expected integer is exact against an integral value
    (``integer_exact``; verl's copy of APPS's harness skips the float comparison for two
    integers)."""
    return numbers_close(want, got, lambda a, b: abs(b - a) <= APPS_ATOL + APPS_RTOL * abs(a))


def lcb_match(expected, actual):
    """``lcb``: as many lines (after stripping the whole text), each equal once stripped, or
    its tokens equal as Decimals."""
    end = object()
    for w, g in zip_longest(lines(expected.strip()), lines(actual.strip()), fillvalue=end):
        if w is end or g is end:
            return False
        w, g = w.strip(), g.strip()
        if w == g:
            continue
        if not all(x is not end and y is not end and lcb_decimal(x) is not None
                   and lcb_decimal(x) == lcb_decimal(y)
                   for x, y in zip_longest(tokens(w), tokens(g), fillvalue=end)):
            return False
    return True


def lcb_decimal(token):
    """``Decimal(token)`` as LiveCodeBench parses it (any form Decimal reads), or None."""
    try:
        value = Decimal(token)
    except (InvalidOperation, ValueError):
        return None
    return None if value.is_nan() else value


def outputs_match(expected, actual, tolerance=None, mode="lines"):
    """Whether ``actual`` passes for ``expected`` under the dataset's ``mode``."""
    # the common case, at C speed: equal but for whitespace at the end (or, where leading
    # blank lines do not count either, at both ends)
    if (expected.rstrip() == actual.rstrip() if mode == "lines"
            else expected.strip() == actual.strip()):
        return True
    if mode == "tokens":
        return sequences_match(tokens(expected), tokens(actual), tolerance)
    if mode == "apps":
        return apps_match(expected, actual)
    if mode == "lcb":
        return lcb_match(expected, actual)
    return lines_match(expected, actual, tolerance)


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
