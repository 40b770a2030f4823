"""Relative closeness: the one rule every numeric comparison of the math verifier applies
(the fast path's, the tolerance layer's, the decimal rule's, an approximation's rounding).

Two values agree within ``tolerance`` when their distance is at most ``tolerance`` times the
larger modulus. Relative only: an absolute allowance would let ``0`` match every tiny
reference (``6.626\\times10^{-34}``); ``0.0`` and ``0`` are equal without one. A SymPy value
is evaluated to ``DIGITS`` significant digits and compared as an exact fraction, so that the
comparison itself rounds nothing.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import sympy

# significant digits: an evaluation error (~1e-30, relative) far below the tightest
# tolerance in use (numbers.EXACT, 1e-15), so rounding never decides a verdict
DIGITS = 30


def close(a: Fraction, b: Fraction, tolerance: float) -> bool:
    """Whether ``a`` and ``b`` agree within the relative ``tolerance`` (``1e-6`` exactly:
    the float's decimal spelling, not its binary value)."""
    return abs(a - b) <= Fraction(str(tolerance)) * max(abs(a), abs(b))


def as_fraction(value: Any) -> Fraction:
    """A real SymPy number at ``DIGITS`` digits, as an exact fraction."""
    return Fraction(str(sympy.Float(value, DIGITS)))


def values_close(a: sympy.Basic, b: sympy.Basic, tolerance: float) -> bool:
    """``close`` for two SymPy constants, complex ones included: the distance in the plane
    against the larger modulus."""
    va, vb = sympy.N(a, DIGITS), sympy.N(b, DIGITS)
    ra, ia, rb, ib = (as_fraction(x) for x in (*va.as_real_imag(), *vb.as_real_imag()))
    distance = (ra - rb) ** 2 + (ia - ib) ** 2
    return distance <= Fraction(str(tolerance)) ** 2 * max(ra * ra + ia * ia, rb * rb + ib * ib)
