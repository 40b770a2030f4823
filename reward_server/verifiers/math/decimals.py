"""A decimal is an approximation of an exact reference, wherever it sits in the answer.

The rule (docs/math.md, "A decimal alone for an exact reference"): ``0.333333`` is not
``\\frac13``, unless it equals it to double precision or the item sets a tolerance. The
fast path and the tolerance layer apply it to a bare number; math-verify, which rounds to
6 places, decides everything else, so the same decimal named (``x = 0.333333``) or nested
(``(0.333333, 0.5)``, ``\\{0.333333\\}``, ``[0.333333, 1]``, a matrix) was paid. Here the
rule is applied to each value of the answer, paired with the reference's value in the same
place: a "yes" of math-verify's that rests on a decimal approximation does not stand.
"""

from __future__ import annotations

from typing import Any

import sympy

from reward_server.verifiers.math.tolerance import values_close

APPROXIMATED = ("a decimal approximates the exact reference (write the exact value, or the "
                "item sets a tolerance)")


def _has_float(value: Any) -> bool:
    if isinstance(value, sympy.MatrixBase):
        return any(entry.has(sympy.Float) for entry in value)
    return isinstance(value, sympy.Basic) and value.has(sympy.Float)


def decimal_verdict(gold: Any, pred: Any, tolerance: float) -> bool | None:
    """For a ``pred`` that carries a decimal and an exact ``gold`` (no decimal in it):
    whether they are equal value by value, each decimal within the relative ``tolerance``
    (the item's, else double precision); None when the rule does not apply or the two
    shapes do not pair up (math-verify decides)."""
    if gold is None or not _has_float(pred) or _has_float(gold):
        return None
    return _equal(gold, pred, tolerance)


def _exact(value: sympy.Basic) -> sympy.Basic:
    """``value`` with each decimal as the fraction it writes (``0.333333`` = 333333/10^6)."""
    return value.xreplace({f: sympy.Rational(str(f)) for f in value.atoms(sympy.Float)})


def _equal(g: Any, p: Any, tolerance: float) -> bool | None:
    """Whether ``g`` and ``p`` are equal value by value, each decimal of ``p`` within
    ``tolerance`` (none against an integer); None when their shapes do not pair."""
    if isinstance(p, sympy.Eq) and not isinstance(g, sympy.Eq):
        if not isinstance(p.lhs, sympy.Symbol):
            return None
        p = p.rhs  # "x = 0.333333": the value named
    pairs: list[tuple[Any, Any]]
    if isinstance(g, sympy.MatrixBase) or isinstance(p, sympy.MatrixBase):
        if not (isinstance(g, sympy.MatrixBase) and isinstance(p, sympy.MatrixBase)
                and g.shape == p.shape):
            return None
        pairs = list(zip(g, p, strict=True))
    elif isinstance(g, sympy.Eq) and isinstance(p, sympy.Eq):
        pairs = [(g.lhs, p.lhs), (g.rhs, p.rhs)]
    elif isinstance(g, sympy.Interval) and isinstance(p, sympy.Interval):
        if (g.left_open, g.right_open) != (p.left_open, p.right_open):
            return None
        pairs = [(g.start, p.start), (g.end, p.end)]
    elif isinstance(g, sympy.Tuple) and isinstance(p, sympy.Tuple):
        if len(g) != len(p):
            return None
        pairs = list(zip(g.args, p.args, strict=True))
    elif isinstance(g, sympy.FiniteSet) and isinstance(p, sympy.FiniteSet):
        if len(g) != len(p) or len(p) > 50:
            return None
        found = [[_equal(a, b, tolerance) for a in g.args] for b in p.args]
        if any(None in row for row in found):
            return None
        return all(any(row) for row in found)
    elif isinstance(g, sympy.Expr) and isinstance(p, sympy.Expr):
        return _values_equal(g, p, tolerance)
    else:
        return None
    verdicts = [_equal(a, b, tolerance) for a, b in pairs]
    return None if None in verdicts else all(verdicts)


def _values_equal(g: sympy.Expr, p: sympy.Expr, tolerance: float) -> bool | None:
    if g == p:
        return True
    if not p.has(sympy.Float):
        return None  # exact on both sides: math-verify's comparison stands
    if g.is_number and p.is_number:
        if g.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
            return None
        if isinstance(g, sympy.Integer):
            tolerance = 0.0  # never a tolerance against an integer (3.0 = 3 still)
        return values_close(g, p, tolerance)
    return bool(sympy.simplify(g - _exact(p)) == 0)  # "0.5 x" = x/2; "0.333333 x" is not x/3

