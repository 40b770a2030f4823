"""The stdin/stdout comparison modes (sandbox/harness/compare.py) as pure functions: each
dataset's grader's rule, integers exact under any tolerance, and megabyte outputs compared
without splitting them into lists."""

from __future__ import annotations

import tracemalloc

import pytest

from sandbox.harness.compare import MODES, outputs_match


@pytest.mark.parametrize(("mode", "expected", "actual", "tolerance", "passes"), [
    # lines: each line's tokens, trailing blank lines and spaces ignored
    ("lines", "1 2\n3\n", "1 2\n3", None, True),
    ("lines", "1 2\n3", "1  2 \n3\n\n", None, True),
    ("lines", " 3", "3", None, True),  # leading spaces: LiveCodeBench's rows have them
    ("lines", "1\n2", "1 2", None, False),
    ("lines", "1\n\n2", "1\n2", None, False),  # a blank line inside counts
    ("lines", "3", "3\n4", None, False),
    ("lines", "0.5", "0.50", None, False),  # no tolerance: text
    ("lines", "007", "7", None, False),  # as testlib's wcmp: text
    ("lines", "1", "1.0", None, False),
    ("lines", "0.5", "0.5000001", 1e-6, True),
    ("lines", "1000000000000", "1000000000001", 1e-6, False),  # two integers: exact
    ("lines", "007 -0 +5", "7 0 5", 1e-6, True),  # by value
    # a decimal against an integer: a real answer printed without a point, so the tolerance
    ("lines", "2", "1.9999999", 1e-6, True),
    # an integral value against an expected integer: exact, however it is written
    ("lines", "1000000000000", "1000000000001.0", 1e-6, False),
    ("lines", "1000000000000 0.5", "1.000001e12 0.5", 1e-6, False),
    ("lines", "123456789012345678901", "1.2345678901234568e+20", 1e-6, False),
    ("lines", "1000000000000", "1000000000000.0", 1e-6, True),
    ("lines", "1000000000000", "1e12", 1e-6, True),
    ("lines", "-0", "0.0", 1e-6, True),
    ("lines", "5", "5e-999999999", 1e-6, False),  # a fraction, and not within 1e-6
    ("lines", "5", "1.5e999999999", 1e-6, False),  # integral, huge: no context, no overflow
    ("lines", "2.0", "2.0000001", 1e-6, True),  # an expected decimal keeps the tolerance
    ("lines", "9" * 5000, "9" * 4999 + "8", 1e-3, False),  # past int()'s 4,300 digits
    ("lines", "nan", "nan", 1e-6, True),
    ("lines", "inf", "1e999", 1e-6, False),  # not a decimal token
    # tokens: line breaks are whitespace
    ("tokens", "1\n2 3", "1 2\n3\n", None, True),
    ("tokens", "1 2", "1 2 3", None, False),
    ("tokens", "1000000000000", "1000000000001", 1e-6, False),
    ("tokens", "007", "7", None, False),
    ("tokens", "007 1", "7 1.0", 1e-6, True),  # under a tolerance, by value
    # apps: lines stripped at both ends, blank lines dropped, or numbers np.allclose
    ("apps", "  a b \n\nc\n", "a b\nc", None, True),
    # inside a line, its tokens (APPS's token sets, in order)
    ("apps", "a b", "a  b", None, True),
    ("apps", "1 2", "1\t2", None, True),
    ("apps", "1 2\n3", " 1   2\n\n3 ", None, True),
    ("apps", "1 2", "12", None, False),
    ("apps", "1 2", "1 2 2", None, False),  # a lost or extra repeat passed APPS's sets
    ("apps", "0.3333333333", "0.333333", None, True),  # within 1e-5 relative
    ("apps", "0.3333", "0.3334", None, False),
    ("apps", "1000000000000", "1000000000001", None, False),  # allclose passes it; not here
    ("apps", "1000000000000", "1000000000001.0", None, False),
    ("apps", "1000000000000", "1.00000000001e12", None, False),
    ("apps", "7", "7.0", None, True),
    ("apps", "2", "2.00001", None, True),
    ("apps", "007", "7", None, True),  # numeric lines by value, as np.allclose
    ("apps", "1 2 3", "3 2 1", None, False),  # APPS's last resort: sets of tokens; not here
    ("apps", "YES\nNO", "NO\nYES", None, False),
    # lcb: whole output stripped, lines stripped, tokens as Decimals
    ("lcb", "  6\n", "6", None, True),
    ("lcb", "\n\n6 7\n", "6   7", None, True),
    ("lcb", "1.0 2", "1 2.00", None, True),
    ("lcb", "1\n\n2", "1\n2", None, False),  # as many lines
    ("lcb", "007", "7", None, True),  # Decimal('007')
    ("lcb", "Yes", "yes", None, False),
    ("lcb", "50000000000000000", "50000000000000001", None, False),
    ("lcb", "1000000000000", "1000000000001.0", None, False),
    ("lcb", "NaN", "nan", None, False),
])
def test_modes(mode: str, expected: str, actual: str, tolerance: float | None,
               passes: bool) -> None:
    assert outputs_match(expected, actual, tolerance, mode) is passes


def test_the_default_is_lines() -> None:
    assert outputs_match(" 3", "3") and not outputs_match("1\n2", "1 2")


@pytest.mark.parametrize("mode", MODES)
def test_megabytes_compare_in_bounded_memory(mode: str) -> None:
    """Two megabytes of tokens on one line and on many, equal but for the spaces: what a
    comparison allocates beside the two texts is one copy of a text at most, where a list of
    their tokens would be six times the text (300,000 strings of ~50 bytes each)."""
    for sep in (" ", "\n"):
        expected = sep.join(str(n) for n in range(300_000))
        actual = expected.replace(sep, sep + " ") + "\n"
        tracemalloc.start()
        try:
            assert outputs_match(expected, actual, None, mode) is True
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 2 * len(actual), (mode, sep, peak)
