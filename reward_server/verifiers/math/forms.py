"""One value stated in two forms, in a worker: the form to compare, or the verdict.

A careful answer often writes its value twice: exact, then approximate (``3\\sqrt{2}
\\approx 4.24``); a fraction and its decimal (``\\frac72 \\text{ or } 3.5``); an identity
whose last side is the answer (``(x-1)(x+4) = x^2+3x-4``); both roots at once (``\\frac{3
\\pm \\sqrt7}{2}``); an inequality for each piece of a union (``x < 1 \\text{ or } x > 4``).
The guards refuse these shapes on sight (``3 \\approx 4``, ``3 \\text{ or } 4``, ``3 = 4``,
``\\pm 2`` offer several values), so each is read here first, and only when its forms
agree: each rule below states the check that keeps it from opening a hack.

``parse`` is the worker's reading of one LaTeX answer (a SymPy object, or None).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import sympy

from reward_server.verifiers.math.markers import Answer
from reward_server.verifiers.math.tolerance import DIGITS, as_fraction

Parse = Callable[[str], Any]

_APPROX = re.compile(r"\\approx(?![a-zA-Z])|≈")
_OR = re.compile(r"\\text\s*\{\s*or\s*\}|(?<![a-zA-Z\\])or(?![a-zA-Z])|\\q?quad")
_DECIMAL = re.compile(r"\s*(-?\d+\.(\d+))\s*(?:\\ldots|\\dots|\.\.\.)?\s*")
_PM = re.compile(r"\\pm(?![a-zA-Z])|±")
_OTHER_RELATION = re.compile(r"[<>]|\\(?:le|ge|leq|geq|neq|ne|approx|lt|gt)(?![a-zA-Z])")
_NAME_SIDE = re.compile(r"\s*\\?[A-Za-z]+(?:_\{?\w{1,10}\}?)?(?:\([^()]{0,20}\))?\s*")
_JOINS = re.compile(r"\\text\s*\{\s*or\s*\}|(?<![a-zA-Z\\])or(?![a-zA-Z])|\\lor(?![a-zA-Z])"
                    r"|\\vee(?![a-zA-Z])|\\cup(?![a-zA-Z])")


def _constant(value: Any) -> bool:
    return isinstance(value, sympy.Expr) and bool(value.is_number) and not value.has(
        sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)


def rounds_to(exact: Any, decimal: str) -> bool:
    """Whether ``decimal`` (``4.24``) is ``exact`` rounded to its written places (within
    half a unit of its last place) or cut there (toward zero, within one unit): the
    approximation of a value stated exactly before it, not a second value (``4 \\approx
    3.9``, ``3\\sqrt{2} \\approx 4.3`` are two)."""
    places = len(decimal.split(".")[1])
    value = sympy.N(exact, DIGITS)
    if not value.is_real:
        return False
    exact_value, written = as_fraction(value), Fraction(decimal)
    unit = Fraction(1, 10 ** places)
    gap = abs(exact_value - written)
    return gap <= unit / 2 or (abs(written) <= abs(exact_value) and gap < unit)


def _approximates(parse: Parse, exact_text: str, decimal_text: str) -> bool:
    decimal = _DECIMAL.fullmatch(decimal_text)
    if decimal is None or _DECIMAL.fullmatch(exact_text):
        return False  # "3.1 \approx 3.14": two approximations, not an exact value and one
    exact = parse(exact_text)
    return _constant(exact) and rounds_to(exact, decimal.group(1))


def exact_before_approximation(answer: str, parse: Parse, decimal_side: bool = False
                               ) -> str | None:
    """``3\\sqrt{2} \\approx 4.24`` -> ``3\\sqrt{2}``, when the decimal is the exact value
    rounded (or cut) to its places; None otherwise (``3 \\approx 4`` stays a relation).
    ``decimal_side``: the decimal instead (``4.24``), for a reference that is itself a
    rounded decimal: the answer's rounding is what compares with it."""
    sides = _APPROX.split(answer)
    if len(sides) != 2:
        return None
    exact, decimal = sides
    name = None
    if "=" in exact:  # "x = 3\sqrt{2} \approx 4.24"
        name, _, exact = exact.rpartition("=")
    if not _approximates(parse, exact, decimal):
        return None
    side = decimal if decimal_side else exact
    return (name + "= " + side.strip()) if name is not None else side.strip()


def equal_alternatives(answer: str, parse: Parse) -> str | None:
    """``\\frac72 \\text{ or } 3.5`` -> ``\\frac72``: two numbers joined by "or" that are one
    value (equal, or the second the first's decimal rounded to its places). Two different
    values stay several candidates."""
    sides = [s for s in _OR.split(answer) if s.strip()]
    if len(sides) != 2 or len(_OR.findall(answer)) > 3:
        return None
    first, second = (s.strip().strip(",").strip() for s in sides)
    a, b = parse(first), parse(second)
    if not (_constant(a) and _constant(b)):
        return None
    if sympy.simplify(a - b) == 0 or _approximates(parse, first, second):
        return first
    return None


def last_side_of_identity(answer: str, parse: Parse) -> str | None:
    """``(x-1)(x+4) = x^2+3x-4`` -> ``x^2+3x-4``: a chain whose sides are all equal
    expressions in letters states each of them; its last side is the answer (as for a true
    computation on numbers, ``16-3-4 = 9``). A chain with an unequal side (``2x = x + 1``,
    ``3 = 4``) is no value, and a name (``x = 3``) is an assignment, not a side."""
    if _OTHER_RELATION.search(answer) or "\\\\" in answer:
        return None
    sides = answer.split("=")
    if not 2 <= len(sides) <= 4 or _NAME_SIDE.fullmatch(sides[0]):
        return None
    values = [parse(side) for side in sides]
    if not all(isinstance(v, sympy.Expr) and not isinstance(v, sympy.Symbol) for v in values):
        return None
    if not any(v.free_symbols for v in values):
        return None  # numbers only: the guards' true-chain rule reads it
    if all(sympy.simplify(v - values[-1]) == 0 for v in values[:-1]):
        return sides[-1].strip()
    return None


def plus_minus(answer: str) -> tuple[str, str] | None:
    """``\\frac{3 \\pm \\sqrt7}{2}`` -> its two values, for a reference with several answers
    (against one answer, ``\\pm`` offers two candidates and stays refused). One expression
    with one ``\\pm`` only: in a list or a set (``\\{1 \\pm \\sqrt5, -2\\}``) math-verify
    reads it."""
    if len(_PM.findall(answer)) != 1 or any(c in answer for c in ",;") or "\\{" in answer:
        return None
    return _PM.sub("+", answer), _PM.sub("-", answer)


def union_of_inequalities(answer: str, gold: Any, parse: Parse) -> bool | None:
    """Against a reference that is a set of reals (an interval or a union of them): an
    answer that writes it as inequalities in one letter joined by "or" (``x < 1 \\text{ or
    } x > 4`` = ``(-\\infty, 1) \\cup (4, \\infty)``) equals it when the union of their
    solution sets is the reference; None when the answer is not that shape."""
    if not isinstance(gold, sympy.Set) or not _JOINS.search(answer):
        return None
    pieces = [p.strip().strip(",").strip() for p in _JOINS.split(answer)]
    if len(pieces) < 2 or len(pieces) > 6 or not all(pieces):
        return None
    union: Any = sympy.EmptySet
    letters = set()
    for piece in pieces:
        value = parse(piece)
        relations = value.args if isinstance(value, sympy.And) else (value,)
        if not all(isinstance(r, sympy.Rel) and not isinstance(r, sympy.Eq | sympy.Ne)
                   for r in relations):
            return None
        symbols = value.free_symbols
        if len(symbols) != 1 or not all(side.is_number or isinstance(side, sympy.Symbol)
                                        for r in relations for side in (r.lhs, r.rhs)):
            return None
        letters |= symbols
        union = sympy.Union(union, value.as_set())
    if len(letters) != 1:
        return None  # "x < 1 or y > 4" is no set of one variable
    return bool(union == gold)


def written_forms(answer: str) -> list[str]:
    """The forms the rules above may compare in place of ``answer``, as written (text only,
    for the server process): the exact side of an approximation, each side of an "or". A
    question copied into one of them (``\\sqrt{50} \\approx 7.07`` for "Simplify
    $\\sqrt{50}$") is still a copy."""
    forms = []
    if _APPROX.search(answer):
        forms.append(_APPROX.split(answer)[0].rpartition("=")[2].strip())
    if _OR.search(answer):
        forms += [side.strip().strip(",").strip() for side in _OR.split(answer)]
    return [form for form in forms if form and form != answer]


def one_form(answer: Answer, several: bool, parse: Parse, decimal_gold: bool = False
             ) -> Answer:
    """``answer`` as the one form to compare (the rules above), or as it is.
    ``decimal_gold``: the reference is a decimal (rounded), so of an exact value and its
    rounding the rounding is compared (``\\frac23 \\approx 0.67`` against ``0.67``)."""
    if answer.kind != "latex" or len(answer.items) != 1:
        return answer
    text = answer.items[0]
    if several:
        both = plus_minus(text)
        return Answer(both) if both else answer
    form = exact_before_approximation(text, parse, decimal_gold)
    if form is not None:
        return Answer((form,))
    for rule in (equal_alternatives, last_side_of_identity):
        form = rule(text, parse)
        if form is not None:
            return Answer((form,))
    return answer
