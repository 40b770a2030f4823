"""The fast path, in the server process, without SymPy or a pool worker: answers that are
plain numbers, or the same LaTeX text as the reference; and the tolerance rule for decimals.

A number is an integer, a decimal, ``1,234`` thousands, ``1,22`` (one comma, not thousands:
a decimal comma, as math-verify reads it), ``a/b`` or ``\\frac{a}{b}``, scientific notation,
optionally with a ``%`` sign, a ``\\$``, degrees or a trailing ``\\text{unit}``. Anything
else (``\\sqrt2``, ``2, 3``, ``x=3``) goes to the worker.

Rules: integers and fractions are exact; when a decimal is written on either side the two
agree within a relative ``tolerance`` (relative only: ``0`` matches only ``0``, never a tiny
reference such as ``1.6\\times10^{-19}``), except against an integer reference, which a
decimal must equal exactly (``3.0`` = ``3``, ``1000000.5`` ≠ ``1000000``);
``p%`` equals ``p`` and ``p/100``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from reward_server.verifiers.math.guards import (
    choice_verdict,
    hedged_words,
    option_set_verdict,
    side_by_side,
    without_layout,
)
from reward_server.verifiers.math.markers import Answer
from reward_server.verifiers.math.tolerance import close
from reward_server.verifiers.math.verdict import Verdict

MAX_EXPONENT = 400  # 1e400 is a number; 1e99999999 is a memory attack on Fraction


@dataclass(frozen=True)
class Number:
    value: Fraction
    inexact: bool = False  # written as a decimal: compared with a tolerance
    percent: bool = False


_INT = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+)")
_THOUSANDS = re.compile(r"[+-]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")
_DECIMAL_COMMA = re.compile(r"[+-]?\d+,\d+")  # "1,22", "0,111": not thousands, one comma
_SLASH = re.compile(r"([+-]?\d+)/([+-]?\d+)")
_FRAC = re.compile(r"([+-]?)\\frac(?:\{([+-]?\d+)\}|(\d))(?:\{(\d+)\}|(\d))")
_SCI = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:\\times|\\cdot|\*)10\^\{?([+-]?\d+)\}?")
_MIXED = re.compile(r"([+-]?)(\d+)(?:\s|\\[,;:! ]|~)+(\d+)/(\d+)")
_E_NOTATION = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))[eE]([+-]?\d+)")
# Decoration that never changes a number's value.
_NOISE = re.compile(
    r"\\[,;:! ]|\\text\s*\{\s*\\?\$\s*\}|\\?\$|\\(?:left|right)(?![a-zA-Z])|\^\{?\\circ\}?|°"
    r"|\\(?:text|mbox|mathrm|textnormal)\s*\{\s*[a-zA-Z][a-zA-Z .]*(?:\^\{?[23]\}?)?\}"
    r"(?:\s*\^\s*\{?\s*[23]\s*\}?)?\s*$"  # "20\\text{ m}^2": a unit, squared or cubed
)
_FRAC_VARIANT = re.compile(r"\\[dtc]frac(?![a-zA-Z])")
# "\text{5 apples}": a number followed by words, all inside one text command
_WORDED = re.compile(
    r"\\(?:text|mbox|textnormal)\s*\{\s*([-+]?[\d.,/]+)(?:\s+[a-zA-Z][a-zA-Z ]*)?\s*\}")
_TEXT_PERCENT = re.compile(r"\\(?:text|mbox|textnormal)\s*\{\s*\\?%\s*\}\s*$")  # 50\text{\%}


# "18 cookies", "#### 18 dollars": a number followed by bare words (3+ letters, no
# function name: "2 \\sin" never gets here, "2 sin" must not become 2)
_BARE_WORDS = re.compile(r"([-+]?[\d.,/]+)\s+([a-zA-Z]{3,}(?:\s+[a-zA-Z]{2,})*)\.?")
_FUNCTION_NAMES = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "exp", "sqrt", "sinh",
                   "cosh", "tanh", "arcsin", "arccos", "arctan", "mod", "deg", "rad"}


def _clean(s: str) -> str:
    worded = _WORDED.fullmatch(s) or _BARE_WORDS.fullmatch(s)
    if worded and not _FUNCTION_NAMES & set(worded.group(0).lower().split()):
        s = worded.group(1)
    s = _TEXT_PERCENT.sub("%", s)
    s = _FRAC_VARIANT.sub(r"\\frac", _NOISE.sub("", s)).replace("{,}", ",")
    return s.replace(" ", "").rstrip(".")


# "2.5 million", "\\$3 \\text{ billion}": a number word that scales, right after the number
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_SCALED = re.compile(r"([^a-zA-Z]{1,40}?)\s*(?:\\(?:text|mbox|mathrm)\s*\{\s*)?"
                     r"(thousand|million|billion|trillion)s?\s*\}?", re.IGNORECASE)


def parse_number(raw: str) -> Number | None:
    """``raw`` as a Number, or None when it is not a plain number."""
    if len(raw) > 200 or ", " in raw:  # "2, 3" is a list, not a decimal comma
        return None
    if side_by_side(raw):  # "7 7 7" is three numbers, not 777 ("12 345" is one)
        return None
    mixed = _MIXED.fullmatch(raw.strip())
    if mixed:  # "2 1/2" is 5/2 (math-verify reads 3/2; without spaces it would be 21/2)
        sign, whole, num, den = mixed.groups()
        if int(num) < int(den):
            value = int(whole) + Fraction(int(num), int(den))
            return Number(-value if sign == "-" else value)
        return None
    scaled = _SCALED.fullmatch(raw.strip())
    if scaled:  # "2.5 \\text{ million}" is 2500000
        number = parse_number(scaled.group(1))
        if number is None or number.percent:
            return None
        return Number(number.value * _SCALES[scaled.group(2).lower()], number.inexact)
    if hedged_words(raw, ""):  # "5 \\text{ or six}", "5 \\text{ dozen}": not a unit
        return None
    s = _clean(raw.strip())
    percent = s.endswith("%")
    if percent:
        s = s[:-1].rstrip("\\")
    value = _plain(s)
    if value is None:
        return None
    return Number(value.value, value.inexact, percent)


# "0.\\overline{3}", "0.1\\bar{6}": a repeating decimal is an exact fraction
_REPEATING = re.compile(r"([+-]?)(\d*)\.(\d*)\\(?:overline|bar)\{?(\d{1,50})\}?")


def _repeating(m: re.Match[str]) -> Fraction:
    sign, whole, fixed, period = m.groups()
    value = Fraction(int(whole or "0")) + Fraction(int(fixed or "0"), 10 ** len(fixed))
    value += Fraction(int(period), (10 ** len(period) - 1) * 10 ** len(fixed))
    return -value if sign == "-" else value


def _plain(s: str) -> Number | None:
    m = _REPEATING.fullmatch(s)
    if m:
        return Number(_repeating(m))
    if _INT.fullmatch(s):
        return Number(Fraction(int(s)))
    if _DECIMAL.fullmatch(s):
        return Number(Fraction(s), inexact=True)
    if _THOUSANDS.fullmatch(s):
        plain = s.replace(",", "")
        return Number(Fraction(plain), inexact="." in plain)
    if _DECIMAL_COMMA.fullmatch(s):
        return Number(Fraction(s.replace(",", ".")), inexact=True)
    m = _SLASH.fullmatch(s)
    if m and int(m.group(2)) != 0:
        return Number(Fraction(int(m.group(1)), int(m.group(2))))
    m = _FRAC.fullmatch(s)
    if m:
        num, den = int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5))
        if den != 0:
            return Number(Fraction(-num if m.group(1) == "-" else num, den))
    m = _SCI.fullmatch(s) or _E_NOTATION.fullmatch(s)
    if m and abs(int(m.group(2))) <= MAX_EXPONENT:
        return Number(Fraction(m.group(1)) * Fraction(10) ** int(m.group(2)), inexact=True)
    return None


def huge_exponent(raw: str) -> bool:
    """``1e99999999``: written as a number, but no value of that size is an answer."""
    s = _clean(raw.strip()) if len(raw) <= 200 else ""
    m = _SCI.fullmatch(s) or _E_NOTATION.fullmatch(s)
    return bool(m) and abs(int(m.group(2))) > MAX_EXPONENT


EXACT = 1e-15  # relative: a decimal that carries an exact value to double precision


def numbers_equal(gold: Number, pred: Number, tolerance: float,
                  exact_tolerance: float = EXACT) -> bool:
    """Exact unless a decimal is written; never a tolerance against an integer reference
    (writing ``1000000.5`` must not buy the tolerance against ``1000000``). A decimal
    reference was itself rounded: ``tolerance`` applies. A decimal answer alone against an
    exact reference (``0.142857`` for ``\\frac17``, ``0.333`` for ``\\frac13``) is an
    approximation, not the answer, whatever its number of digits: it must equal the
    reference to double precision (``0.25`` = ``\\frac14``; ``0.0833333333333333`` =
    ``\\frac1{12}``, as a program prints it), unless the item sets a ``tolerance``
    (``exact_tolerance``), which then applies at every digit count."""
    integer_gold = not gold.inexact and gold.value.denominator == 1
    if gold.inexact:
        allowed: float | None = tolerance
    elif pred.inexact and not integer_gold:
        allowed = exact_tolerance
    else:
        allowed = None
    pairs = [(gold.value, pred.value)]
    if gold.percent != pred.percent:  # 50% answers 50 and 0.5
        pairs.append((gold.value / 100, pred.value) if gold.percent
                     else (gold.value, pred.value / 100))
    return any(g == p if allowed is None else close(g, p, allowed) for g, p in pairs)


def same_text(a: str, b: str) -> bool:
    """The same LaTeX up to spacing, ``\\left``/``\\right`` and ``\\dfrac``: the same
    value, whatever it is, so no parser is needed to say so. Spacing between two numbers
    is no layout (``7 7 7`` is not ``777``)."""
    if side_by_side(a) or side_by_side(b):
        return a.strip() == b.strip()

    def canon(s: str) -> str:
        return without_layout(s).rstrip(".")
    return canon(a) == canon(b) != ""


SIDE_BY_SIDE = "numbers side by side ('7 7 7'): several values, not one"
COMPUTED = "a computation on numbers, not its value: an answer states the number"


def restated_division(pred_text: str, pred: Number, gold_text: str) -> bool:
    """``84/12`` (or ``\\frac{84}{12}``) for 7: a fraction whose value is a whole number,
    against a reference written as a whole number (not ``7.0``, not a fraction): the
    question's division restated, not done (the demo's restated-sum hack, on a division
    prompt)."""
    def fraction(text: str) -> bool:
        return "/" in text or "frac" in text

    gold = parse_number(gold_text)
    return (pred.value.denominator == 1 and fraction(pred_text) and gold is not None
            and gold.value.denominator == 1 and not gold.inexact and not fraction(gold_text))


def fast_check(pred: Answer, gold: Answer, tolerance: float, exact_tolerance: float = EXACT
               ) -> Verdict | None:
    """The verdict when both answers are plain numbers, or when they are the same LaTeX
    text; else None (the worker decides)."""
    if gold.kind != "latex" or len(pred.items) != 1:
        return None  # a response that is only a number is one, whatever its kind
    choice = choice_verdict(pred.text, pred.kind != "latex", gold.text)
    if choice is None and pred.kind == "latex":
        choice = option_set_verdict(pred.text, gold.text)  # "A, B, D" = "\\text{D, A, B}"
    if choice is not None:  # "(C) 12", "The answer is (C)." against "C"
        return Verdict(choice, "ok", None if choice else "another option than the reference")
    if pred.kind == "latex" and side_by_side(pred.text) and not side_by_side(gold.text):
        return Verdict(False, "ok", SIDE_BY_SIDE)
    if pred.kind == "latex" and same_text(pred.text, gold.text):
        return Verdict(True, "ok", None)
    if huge_exponent(pred.text):
        return Verdict(False, "parse_error", f"exponent out of range (over {MAX_EXPONENT})")
    g, p = parse_number(gold.text), parse_number(pred.text)
    if g is None or p is None:
        return None
    if numbers_equal(g, p, tolerance, exact_tolerance):
        if restated_division(pred.text, p, gold.text):
            return Verdict(False, "ok", COMPUTED)
        return Verdict(True, "ok", None)
    return Verdict(False, "ok", "not equivalent to the reference")
