"""The unit of work a math worker process runs: math-verify parses and compares.

Runs inside a pool worker under the pool's wall-clock timeout and memory cap, so
math-verify's own signal-based timeouts are switched off (``parsing_timeout=None``,
``timeout_seconds=None``): ``signal.alarm`` is the pool's job, and a second alarm in the
worker would fight it. Over math-verify's verdict sit two thin layers it lacks:

- tolerance: when a decimal is written on either side of two numeric constants, they agree
  within the item's relative tolerance (math-verify rounds to 6 decimal places instead, so
  ``3.14159`` ≠ ``π`` there, and a tolerance cannot be set per item);
- equations: two equations that are non-zero multiples of each other agree
  (``2x+4=0`` = ``x+2=0``; math-verify's solver path raises on single-variable equations).

And guards where math-verify is lenient: an answer it read from prose that stands in a list
("3 or 4") is several candidates against a one-answer reference; ``\\mathrm{e}`` stays
Euler's number; a trailing percent sign is read around the ANTLR 4.9 grammar's bug.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any

import sympy
from latex2sympy2_extended.latex2sympy2 import convert_to_pct
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from reward_server.verifiers.math import fast_parse
from reward_server.verifiers.math.commit import HEDGED, answering_sentence, hedges
from reward_server.verifiers.math.decimals import APPROXIMATED, decimal_verdict
from reward_server.verifiers.math.forms import one_form, union_of_inequalities
from reward_server.verifiers.math.guards import (
    TEXT_SEPARATOR,
    computation,
    hedged_words,
    join_groups,
    letter_sequence,
    offers_several,
    power_of_ten,
    relation_for_value,
    side_by_side,
    stated_equation,
    stated_part,
    undone_arithmetic,
)
from reward_server.verifiers.math.markers import Answer
from reward_server.verifiers.math.numbers import (
    COMPUTED,
    EXACT,
    SIDE_BY_SIDE,
    parse_number,
    restated_division,
)
from reward_server.verifiers.math.prose import multiplied_read, negated_read, scaled_read
from reward_server.verifiers.math.tolerance import values_close
from reward_server.verifiers.math.verdict import Verdict

UNDONE = "arithmetic on numbers left undone: an answer states the value, not the sum"
NEGATED = "a negated candidate ('not 9') is no answer"
MULTIPLIED = "a word after the number changes its value ('2 squared', '3 dozen', '5 times 4')"
UNSOLVED = "an equation left unsolved: the reference states the unknown's value"

# the suite's own configuration: a box is read before any other LaTeX
_CONFIG = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
# "marked": a number counts only after "answer"
_MARKED = (LatexExtractionConfig(boxed_match_priority=0),
           ExprExtractionConfig(try_extract_without_anchor=False))

# math-verify warns once that its timeouts are off; here that is the design
logging.getLogger("math_verify").setLevel(logging.ERROR)
fast_parse.install()  # SLL before LL: the same trees, several times faster (see there)


# latex2sympy2_extended's unit rule eats "\mathrm{e}}" (it reads e as a unit), so
# 1 - 1/\mathrm{e} and 1 + 1/\mathrm{e} both became 1; a roman e is Euler's number.
_ROMAN_E = re.compile(r"\\(?:mathrm|text|textrm|rm)\s*\{\s*e\s*\}")


def parse_answer(answer: Answer, several: bool = False) -> list[Any]:
    """math-verify's reading of an answer: SymPy objects, then the matched string.

    ``several``: the reference has several answers, so boxes math-verify would join count
    as one list (the several-answers rule); otherwise only separator-joined boxes do."""
    config = _MARKED if answer.kind == "marked" else _CONFIG
    if answer.kind != "latex":
        return _parse(answer.items[0], config)
    items = answer.wide if several and answer.wide else answer.items
    percent = _PERCENT.search(items[-1]) if len(items) == 1 else None
    if percent is None:
        return _parse("\\boxed{" + ", ".join(items) + "}", config)
    # "28\%": the ANTLR 4.9 build of the grammar (which hydra's pin selects) fails on a
    # trailing percent sign, so read the number and mark it as latex2sympy does
    values = _parse("\\boxed{" + items[-1][: percent.start()] + "}", config)
    return [convert_to_pct(v) if isinstance(v, sympy.Basic) else v for v in values]


_PERCENT = re.compile(r"\s*(?:\\?%|\\text\{\s*%\s*\}|percentage|percent|pct)\s*$")


def _parse(text: str, config: tuple[Any, ...]) -> list[Any]:
    return parse(_ROMAN_E.sub("e", join_groups(text)), list(config), parsing_timeout=None)


def _parse_one(text: str) -> Any:
    """One LaTeX answer as SymPy, or None (the forms rules' reader)."""
    return _first_expr(_parse("\\boxed{" + text + "}", _CONFIG))


def has_several(values: list[Any]) -> bool:
    """A reference with several answers: a list or set of two or more."""
    first = _first_expr(values)
    return isinstance(first, sympy.FiniteSet) and len(first) > 1


# References this long are parsed each time: the cache below would otherwise hold whatever
# a caller sends (4096 worked solutions of 2 MB), up to the worker's memory limit, where
# another caller's check would then run out of memory
GOLD_CACHE_MAX_CHARS = 4096


def parse_gold(answer: Answer) -> list[Any]:
    """References repeat G times in a group; parse each once per worker (short ones)."""
    if sum(len(text) for text in (*answer.items, *(answer.wide or ()))) > GOLD_CACHE_MAX_CHARS:
        return _parse_gold(answer)
    return _parse_gold_cached(answer)


def _parse_gold(answer: Answer) -> list[Any]:
    """A bare number is read as the fast path reads it (``1,22`` is 1.22 there, as
    math-verify's number rule has it; its LaTeX parser would make it the list 1, 22)."""
    number = parse_number(answer.text) if answer.kind == "latex" else None
    if number is not None and not number.percent:
        value = number.value
        if number.inexact:
            return [sympy.Float(float(value)) if value.denominator != 1 else sympy.Integer(
                value.numerator), answer.text]
        return [sympy.Rational(value.numerator, value.denominator), answer.text]
    return parse_answer(answer)


_parse_gold_cached = lru_cache(maxsize=4096)(_parse_gold)


def check(pred: Answer, gold: Answer, tolerance: float, exact_tolerance: float = EXACT
          ) -> Verdict:
    """``tolerance``: relative, for a decimal against a decimal reference (itself rounded);
    ``exact_tolerance``: for a decimal alone against an exact reference (``\\frac17``,
    ``\\pi``), EXACT unless the item sets a tolerance (numbers.py states the rule)."""
    gold_values = parse_gold(gold)
    if not gold_values:
        return Verdict(False, "parse_error", "reference answer: no answer found in it")
    several = has_several(gold_values)
    if pred.kind == "latex" and len(pred.items) == 1:
        try:
            union = union_of_inequalities(pred.items[0], _first_expr(gold_values), _parse_one)
            if union is not None:  # "x < 1 \\text{ or } x > 4" for a union of intervals
                return Verdict(union, "ok", None if union else "not equivalent to the reference")
            gold_expr = _first_expr(gold_values)
            decimal_gold = isinstance(gold_expr, sympy.Basic) and gold_expr.has(sympy.Float)
            pred = one_form(pred, several, _parse_one, decimal_gold)
        except Exception:  # SymPy raises many types on exotic input: compare as written
            pass
    pred_values = parse_answer(pred, several=several)
    if not pred_values:
        return Verdict(False, "no_answer", "no answer found in the response")
    read = str(pred_values[-1])[:200] if pred.kind != "latex" else None
    scaled = scaled_read(pred.items[0], read) if read else None
    number = parse_number(scaled) if scaled else None
    if number is not None:  # "The answer is 5 thousand.": 5000, as the boxed form reads
        value = number.value
        written = str(value.numerator) if value.denominator == 1 else str(float(value))
        return check(Answer((written,)), gold, tolerance, exact_tolerance)
    correct = _layers(gold_values, pred_values, tolerance, exact_tolerance)
    if correct is None:  # "x = 0.333333", "(0.333333, 0.5)" for an exact reference
        correct = decimal_verdict(_first_value(gold_values), _first_value(pred_values),
                                  exact_tolerance)
        if correct is False:
            return Verdict(False, "ok", APPROXIMATED, read)
    if correct is None:
        correct = verify(gold_values, pred_values, timeout_seconds=None)
    why = (_guarded(pred, gold, gold_values, pred_values, read)
           if correct and not several else None)
    if why:
        return Verdict(False, "ok", why, read)
    if correct:
        return Verdict(True, "ok", None, read)
    if not any(isinstance(v, sympy.Basic | sympy.MatrixBase) for v in pred_values):
        detail = f"cannot read {str(pred_values[-1])[:80]!r} as math"
        return Verdict(False, "parse_error", detail, read)
    return Verdict(False, "ok", "not equivalent to the reference", read)


def _guarded(pred: Answer, gold: Answer, gold_values: list[Any], pred_values: list[Any],
             read: str | None) -> str | None:
    """Why math-verify's "yes" does not stand against a one-answer reference (``guards``),
    or None: candidates in prose; words that hedge; a relation or chain read as its last
    side; letters in another order."""
    value = isinstance(_first_expr(gold_values), sympy.Expr)
    if value and undone_arithmetic(read or pred.text) and not undone_arithmetic(gold.text):
        return UNDONE
    why = _not_stated(read or pred.text, gold.text, gold_values, pred_values)
    if why:
        return why
    if read:  # math-verify's match: "3 \\to 4" read as 3 is a relation, not a value
        if hedges(answering_sentence(pred.items[0])[0]):
            return HEDGED  # "I think it is 8, though 10 would also be defensible"
        if negated_read(pred.items[0], read):
            return NEGATED
        if multiplied_read(pred.items[0], read, gold.text):
            return MULTIPLIED  # "The answer is 2 squared." read as 2
        if offers_several(pred.items[0], read):
            return "several candidate answers offered for one"
        equation = stated_equation(pred.items[0], read) if value else None
        if equation and not _true_chain(equation):
            return "an equation between values, not a value"
        why = relation_for_value(read) if value else None
        return None if why and _true_chain(read) else why
    answer = pred.text
    if TEXT_SEPARATOR.search(answer) and not TEXT_SEPARATOR.search(gold.text):
        return "several candidate answers offered for one"  # "3 \\text{, } 4" read as 4
    if hedged_words(answer, gold.text):
        return "the answer hedges or qualifies itself in words"
    if side_by_side(answer) and not side_by_side(gold.text):
        return SIDE_BY_SIDE  # math-verify reads "7 7 7" as 21
    if value:
        why = relation_for_value(answer)
        if why and not _true_chain(answer):
            return why
    mine, theirs = letter_sequence(answer), letter_sequence(gold.text)
    if mine is not None and theirs is not None and mine.lower() != theirs.lower():
        return "a different sequence of letters (their order matters)"
    return None


def _number_of(expr: Any) -> Any:
    """The rational number a reference states (``59``, ``x = 59``: 59), or None."""
    if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol):
        expr = expr.rhs
    return expr if isinstance(expr, sympy.Rational) else None


def _not_stated(written: str, gold_text: str, gold_values: list[Any], pred_values: list[Any]
                ) -> str | None:
    """Against a reference that is a rational number, an equal answer must be written as a
    number, not as the computation that gives it.

    math-verify evaluates what it reads, so the question's own expression, boxed
    (``\\dbinom{8}{4}`` for 70, ``\\frac{1}{2}+\\frac{1}{3}`` for 5/6, ``\\sqrt{144}``,
    ``2(16-3-4)``, ``84/12`` for 7, ``x = 14 - 9``), would be paid as the value a policy
    never computed. Of a chain (``x = 5+6 = 11``) the last side counts; ``10^{6}`` and
    ``1.5\\times10^{3}`` are numbers. An equation whose sides are neither the unknown
    (``x + 9 = 14`` for ``x = 5``) is unsolved."""
    gold, pred = _first_expr(gold_values), _first_expr(pred_values)
    number = _number_of(gold)
    if number is None or not isinstance(pred, sympy.Basic):
        return None
    if isinstance(gold, sympy.Eq) and isinstance(pred, sympy.Eq) and not (
            isinstance(pred.lhs, sympy.Symbol) or isinstance(pred.rhs, sympy.Symbol)):
        return UNSOLVED
    if pred.free_symbols - (gold.free_symbols if isinstance(gold, sympy.Eq) else set()):
        return None  # an answer in letters is math-verify's to compare
    part = stated_part(written)
    while part.startswith("(") and part.endswith(")") and match_paren(part):
        part = part[1:-1].strip()
    if power_of_ten(part):
        return None
    stated = parse_number(part)
    if stated is not None:  # a number as written: "84/12" for 7 is still the division
        return COMPUTED if restated_division(part, stated, gold_text) else None
    return COMPUTED if computation(part) else None


def match_paren(text: str) -> bool:
    """Whether the ``(`` at 0 closes at the last character."""
    depth = 0
    for i, c in enumerate(text):
        depth += c == "("
        depth -= c == ")"
        if depth == 0:
            return i == len(text) - 1
    return False


def _true_chain(text: str) -> bool:
    """``16 - 3 - 4 = 9``: a computation whose sides are all numbers, and equal; its value is
    the last side (``2 + 2 = 5`` and ``3 = 4`` are false, so they are no value)."""
    sides = text.split("=")
    if not 2 <= len(sides) <= 4 or "\\\\" in text or any(c in text for c in "<>|&"):
        return False
    values = []
    for side in sides:
        parsed = _first_expr(_parse("\\boxed{" + side + "}", _CONFIG))
        if not (isinstance(parsed, sympy.Expr) and _is_constant(parsed)):
            return False
        values.append(parsed)
    return all(sympy.simplify(v - values[-1]) == 0 for v in values[:-1])


def _layers(gold: list[Any], pred: list[Any], tolerance: float, exact_tolerance: float
            ) -> bool | None:
    """Our verdict where a layer applies, else None (math-verify decides)."""
    g, p = _first_expr(gold), _first_expr(pred)
    if g is None or p is None:
        return None
    try:
        if isinstance(g, sympy.Eq) and isinstance(p, sympy.Eq) and _multiples(g, p):
            return True
        if isinstance(g, sympy.Set) and _bounds_one_symbol(p):
            return bool(p.as_set() == g)  # "x > 2" = (2, \infty), "1 \le x \le 3" = [1, 3]
        return _within_tolerance(g, p, tolerance, exact_tolerance)
    except Exception:  # SymPy raises many types on exotic input: let math-verify decide
        return None


def _bounds_one_symbol(p: Any) -> bool:
    """``x > 2``, ``1 \\le x \\le 3``: inequalities between one plain symbol and numbers
    (``0 < f(x) < 1`` is math-verify's to compare)."""
    relations = p.args if isinstance(p, sympy.And) else (p,)
    if not all(isinstance(r, sympy.Rel) and not isinstance(r, sympy.Eq | sympy.Ne)
               for r in relations):
        return False
    sides = [side for r in relations for side in (r.lhs, r.rhs)]
    symbols = {side for side in sides if isinstance(side, sympy.Symbol)}
    return len(symbols) == 1 and all(
        isinstance(side, sympy.Symbol) or (side.is_number and side.is_real) for side in sides)


def _first_expr(values: list[Any]) -> Any:
    return next((v for v in values if isinstance(v, sympy.Basic)), None)


def _first_value(values: list[Any]) -> Any:
    """The first SymPy value, a matrix included (which is no ``sympy.Basic``)."""
    return next((v for v in values if isinstance(v, sympy.Basic | sympy.MatrixBase)), None)


def _multiples(g: sympy.Eq, p: sympy.Eq) -> bool:
    if isinstance(g.lhs, sympy.Symbol) or isinstance(p.lhs, sympy.Symbol):
        return False  # an assignment (x = …, F_n = …): math-verify compares right sides
    dg, dp = g.lhs - g.rhs, p.lhs - p.rhs
    if not (dg.is_polynomial() and dp.is_polynomial() and dg.free_symbols and dp.free_symbols):
        return False
    ratio = sympy.simplify(dg / dp)
    return bool(not ratio.free_symbols and ratio != 0 and ratio.is_finite)


def _within_tolerance(g: sympy.Basic, p: sympy.Basic, tolerance: float,
                      exact_tolerance: float) -> bool | None:
    if not (_is_constant(g) and _is_constant(p)):
        return None
    if not (g.has(sympy.Float) or p.has(sympy.Float)):
        return None  # exact on both sides: math-verify compares exactly
    if isinstance(g, sympy.Integer):
        tolerance = 0.0  # never a tolerance against an integer reference (3.0 = 3 still)
    elif not g.has(sympy.Float):
        tolerance = exact_tolerance  # "3.14159" alone is no answer for \pi
    gold_values = {_unpercent(g), g}
    pred_values = {_unpercent(p), p}
    return any(values_close(a.doit(), b.doit(), tolerance)
               for a in gold_values for b in pred_values)


def _is_constant(v: sympy.Basic) -> bool:
    return isinstance(v, sympy.Expr) and v.is_number and not v.has(
        sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)


def _unpercent(v: sympy.Basic) -> sympy.Basic:
    """latex2sympy writes ``28%`` as ``28 * UnevaluatedExpr(1/100)``; its number is 28."""
    if isinstance(v, sympy.Mul) and len(v.args) == 2 and v.args[1] == sympy.UnevaluatedExpr(
        sympy.Rational(1, 100)
    ):
        return v.args[0]
    return v


# Typical answer shapes. ANTLR's parser builds its prediction tables lazily, so the first
# parse of each shape costs several times a later one; pay that at worker start instead.
_WARM_UP_PAIRS = [  # few: a worker killed by a timeout pays this again
    ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"), ("(1, 2]", "(1,2]"), ("x^2+2x+1", "(x+1)^2"),
    ("y = 2x + 1", "y=1+2x"), ("\\{1, 2\\}", "\\{2, 1\\}"), ("3.14", "\\pi"),
]


def warm_up() -> None:
    """Import and exercise SymPy, the LaTeX parser and math-verify before the first item."""
    for pred, gold in _WARM_UP_PAIRS:
        check(Answer((pred,)), Answer((gold,)), 1e-6)
