"""Decide whether a response value equals the reference value.

Rules, in words (the README's table repeats them):
- numbers are equal exactly, unless one was written as a decimal: then within a relative
  ``tolerance``; a percentage ``p%`` equals ``p`` and ``p/100``;
- closed forms (``2\\sqrt2``, ``\\sqrt8``) are equal when their difference simplifies to 0
  or, for constants, is 0 to 30 significant digits;
- ``x = 3`` equals ``3``; two equations are equal when one is a non-zero multiple of the
  other;
- tuples and intervals need the same brackets and elements in order; sets and bare lists
  ignore order; matrices compare element-wise; unions compare as sets of their parts;
- several candidates (``3 or 4``, ``\\pm 2``) equal only a reference with the same
  candidates: offering a list is not a way to hit the answer.
"""

from __future__ import annotations

import random
from fractions import Fraction

import sympy

from reward_server.verifiers.math.values import (
    BareList,
    Bracketed,
    Candidates,
    Equation,
    Matrix,
    Scalar,
    Text,
    UnionOf,
    Value,
)

_DIGITS = 30


def equivalent(gold: Value, pred: Value, tolerance: float) -> bool:
    if isinstance(gold, Equation) and not isinstance(pred, Equation):
        return gold.symbol is not None and equivalent(gold.rhs, pred, tolerance)
    if isinstance(pred, Equation) and not isinstance(gold, Equation):
        return pred.symbol is not None and equivalent(gold, pred.rhs, tolerance)
    if type(gold) is not type(pred):
        return _loose_container_match(gold, pred, tolerance)
    match gold:
        case Scalar():
            return _scalars_equal(gold, pred, tolerance)  # type: ignore[arg-type]
        case Text():
            return gold.text == pred.text  # type: ignore[union-attr]
        case Equation():
            return _equations_equal(gold, pred, tolerance)  # type: ignore[arg-type]
        case Bracketed():
            return _bracketed_equal(gold, pred, tolerance)  # type: ignore[arg-type]
        case BareList() | Candidates() | UnionOf():
            return _unordered_equal(_items(gold), _items(pred), tolerance)
        case Matrix():
            return len(gold.rows) == len(pred.rows) and all(  # type: ignore[union-attr]
                _ordered_equal(g, p, tolerance)
                for g, p in zip(gold.rows, pred.rows, strict=True)  # type: ignore[union-attr]
            )
    return False


def _items(value: Value) -> tuple[Value, ...]:
    return value.parts if isinstance(value, UnionOf) else value.items  # type: ignore[union-attr]


def _loose_container_match(gold: Value, pred: Value, tolerance: float) -> bool:
    """A set written ``\\{1, 2\\}`` and a bare list ``1, 2`` both mean "these answers"."""
    if _is_unordered(gold) and _is_unordered(pred):
        return _unordered_equal(gold.items, pred.items, tolerance)  # type: ignore[union-attr]
    text, other = (gold, pred) if isinstance(gold, Text) else (pred, gold)
    if isinstance(text, Text) and isinstance(other, Scalar):
        value = other.value
        return isinstance(value, sympy.Symbol) and str(value).lower() == text.text
    return False


def _is_unordered(value: Value) -> bool:
    """A set, a bare list and "a or b" all state a collection of answers."""
    return isinstance(value, BareList | Candidates) or (
        isinstance(value, Bracketed) and value.open == "{"
    )


def _bracketed_equal(gold: Bracketed, pred: Bracketed, tolerance: float) -> bool:
    if gold.open == "{" or pred.open == "{":
        both_sets = gold.open == pred.open == "{"
        return both_sets and _unordered_equal(gold.items, pred.items, tolerance)
    same_ends = gold.open == pred.open and gold.close == pred.close
    return same_ends and _ordered_equal(gold.items, pred.items, tolerance)


def _ordered_equal(gold: tuple[Value, ...], pred: tuple[Value, ...], tolerance: float) -> bool:
    return len(gold) == len(pred) and all(
        equivalent(g, p, tolerance) for g, p in zip(gold, pred, strict=True)
    )


def _unordered_equal(gold: tuple[Value, ...], pred: tuple[Value, ...], tolerance: float) -> bool:
    """Multiset equality under ``equivalent`` (greedy matching: equivalence is transitive)."""
    if len(gold) != len(pred):
        return False
    remaining = list(pred)
    for g in gold:
        for k, p in enumerate(remaining):
            if equivalent(g, p, tolerance):
                del remaining[k]
                break
        else:
            return False
    return True


def _equations_equal(gold: Equation, pred: Equation, tolerance: float) -> bool:
    if gold.symbol is not None and pred.symbol is not None:
        return gold.symbol == pred.symbol and equivalent(gold.rhs, pred.rhs, tolerance)
    g, p = _as_expr(gold.lhs) - _as_expr(gold.rhs), _as_expr(pred.lhs) - _as_expr(pred.rhs)
    if g == 0 or p == 0:
        return g == p
    ratio = sympy.simplify(g / p)
    return not ratio.free_symbols and ratio != 0 and ratio.is_finite is not False


# --- scalars -------------------------------------------------------------------------------


def _scalars_equal(gold: Scalar, pred: Scalar, tolerance: float) -> bool:
    inexact = gold.inexact or pred.inexact
    g, p = gold.value, pred.value
    candidates = [(g, p)]
    if gold.percent != pred.percent:
        # 50% answers 50 and 0.5; either side may carry the sign
        if gold.percent:
            candidates.append((_div100(g), p))
        else:
            candidates.append((g, _div100(p)))
    return any(_values_equal(a, b, inexact, tolerance) for a, b in candidates)


def _div100(v: Fraction | sympy.Basic) -> Fraction | sympy.Basic:
    return v / 100 if isinstance(v, Fraction) else v / sympy.Integer(100)


def _values_equal(a: Fraction | sympy.Basic, b: Fraction | sympy.Basic, inexact: bool,
                  tolerance: float) -> bool:
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return _close(a, b, tolerance) if inexact else a == b
    sa, sb = _sympify(a), _sympify(b)
    if isinstance(sa, sympy.logic.boolalg.Boolean) or isinstance(sb, sympy.logic.boolalg.Boolean):
        return _relations_equal(sa, sb)
    if not isinstance(sa, sympy.Expr) or not isinstance(sb, sympy.Expr):
        return _structural_equal(sa, sb)
    if sa.free_symbols or sb.free_symbols:
        return _symbolic_equal(sa, sb)
    return _constants_equal(sa, sb, inexact, tolerance)


def _close(a: Fraction, b: Fraction, tolerance: float) -> bool:
    # the absolute floor lets 0.0 match 0 and absorbs the last printed digit of tiny values
    return abs(a - b) <= Fraction(tolerance) * max(abs(a), abs(b)) + Fraction(1, 10**9)


def _sympify(v: Fraction | sympy.Basic) -> sympy.Basic:
    if isinstance(v, Fraction):
        return sympy.Rational(v.numerator, v.denominator)
    return v.doit() if hasattr(v, "doit") else v


def _constants_equal(a: sympy.Expr, b: sympy.Expr, inexact: bool, tolerance: float) -> bool:
    if a.is_infinite or b.is_infinite or a.has(sympy.zoo, sympy.nan) or b.has(sympy.zoo, sympy.nan):
        return bool(a == b) and not a.has(sympy.zoo, sympy.nan)
    if a.is_Rational and b.is_Rational and not inexact:
        return bool(a == b)
    va, vb = sympy.N(a, _DIGITS), sympy.N(b, _DIGITS)
    if not (va.is_number and vb.is_number):
        return False
    if inexact:
        ra, ia = va.as_real_imag()
        rb, ib = vb.as_real_imag()
        return _float_close(ra, rb, tolerance) and _float_close(ia, ib, tolerance)
    diff = sympy.Abs(va - vb)
    scale = max(sympy.Abs(va), sympy.Abs(vb), sympy.Integer(1))
    return bool(diff <= scale * sympy.Float(10) ** (-(_DIGITS - 5)))


def _float_close(a: sympy.Expr, b: sympy.Expr, tolerance: float) -> bool:
    try:
        fa, fb = Fraction(str(sympy.Float(a, _DIGITS))), Fraction(str(sympy.Float(b, _DIGITS)))
    except (TypeError, ValueError):
        return False
    return _close(fa, fb, tolerance)


def _symbolic_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    diff = a - b
    if sympy.expand(diff) == 0 or sympy.simplify(diff) == 0:
        return True
    return _equal_at_random_points(diff)


def _equal_at_random_points(diff: sympy.Expr, points: int = 4) -> bool:
    """Identities simplify misses (trigonometric, logarithmic) vanish numerically everywhere."""
    rng = random.Random(0)
    symbols = sorted(diff.free_symbols, key=str)
    for _ in range(points):
        subs = {s: sympy.Rational(rng.randint(11, 97), rng.randint(7, 31)) for s in symbols}
        value = sympy.N(diff.subs(subs), _DIGITS)
        if not value.is_number or value.has(sympy.zoo, sympy.nan) or abs(value) > 1e-20:
            return False
    return True


def _relations_equal(a: sympy.Basic, b: sympy.Basic) -> bool:
    if isinstance(a, sympy.core.relational.Relational) and isinstance(
        b, sympy.core.relational.Relational
    ):
        ca, cb = a.canonical, b.canonical
        same = sympy.simplify(ca.lhs - ca.rhs - (cb.lhs - cb.rhs)) == 0
        return type(ca) is type(cb) and bool(same)
    return bool(a == b)


def _structural_equal(a: sympy.Basic, b: sympy.Basic) -> bool:
    """Sets and intervals that latex2sympy built from notation we do not split ourselves."""
    try:
        return bool(a == b) or bool(sympy.simplify(a - b) == 0)  # type: ignore[operator]
    except (TypeError, AttributeError, NotImplementedError):
        return False


def _as_expr(value: Value) -> sympy.Expr:
    if isinstance(value, Scalar):
        return _sympify(value.value)
    raise TypeError("equation sides must be expressions")
