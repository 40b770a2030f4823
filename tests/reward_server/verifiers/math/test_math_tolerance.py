"""The one closeness rule (``math.tolerance``) as a table: relative only, the tolerance as
written, complex values by their distance in the plane; the SymPy form agrees with the
fraction form on real values."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy

from reward_server.verifiers.math.tolerance import as_fraction, close, values_close


@pytest.mark.parametrize(("a", "b", "tolerance", "agree"), [
    (Fraction(1), Fraction(1), 0.0, True),
    (Fraction(0), Fraction(0), 1e-6, True),
    (Fraction(0), Fraction(1, 10**20), 1e-6, False),  # relative only: 0 is no tiny number
    (Fraction(1), Fraction(1_000_001, 1_000_000), 1e-6, True),  # 1e-6 exactly, as written
    (Fraction(1), Fraction(1_000_002, 1_000_000), 1e-6, False),
    (Fraction(-3), Fraction(3), 2.0, True),  # 6 against the larger modulus, 3
    (Fraction(-3), Fraction(3), 1.0, False),
])
def test_close(a: Fraction, b: Fraction, tolerance: float, agree: bool) -> None:
    assert close(a, b, tolerance) is agree
    assert values_close(sympy.Rational(a), sympy.Rational(b), tolerance) is agree


@pytest.mark.parametrize(("a", "b", "tolerance", "agree"), [
    (sympy.pi, sympy.Float("3.14159"), 1e-6, True),
    (sympy.pi, sympy.Float("3.1415"), 1e-6, False),
    (sympy.sqrt(2), sympy.Float("1.41421356"), 1e-8, True),
    (sympy.I * 2, sympy.Float("2.0001") * sympy.I, 1e-3, True),  # distance in the plane
    (1 + sympy.I, 1 + sympy.Float("1.01") * sympy.I, 1e-3, False),
    (sympy.exp(sympy.I * sympy.pi / 4), sympy.Float("0.70710678") * (1 + sympy.I), 1e-6, True),
])
def test_values_close(a: sympy.Expr, b: sympy.Expr, tolerance: float, agree: bool) -> None:
    assert values_close(a, b, tolerance) is agree


def test_a_value_becomes_the_fraction_of_its_thirty_digits() -> None:
    third = as_fraction(sympy.Rational(1, 3))
    assert third != Fraction(1, 3) and abs(third - Fraction(1, 3)) < Fraction(1, 10**29)
