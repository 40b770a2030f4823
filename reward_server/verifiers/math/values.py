"""Turn an answer string into a comparable value.

The structure of an answer (a set, a tuple or interval, a union of intervals, a bare list,
a matrix, an equation, a percentage, a text answer) is read here from its top-level
brackets and separators; each element is then parsed as a number by a fast path, or as
LaTeX by ``latex2sympy2_extended`` into SymPy. No LaTeX grammar is written here: only the
splitting that decides what kind of answer it is, which is what a grader must get right to
refuse ``(2,1)`` for ``(1,2)`` (SymPy would read both as the empty interval).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import sympy
from latex2sympy2_extended import latex2sympy
from latex2sympy2_extended.math_normalization import NormalizationConfig

MAX_NESTING = 64  # deeper brackets are not an answer; they are an attack on the parser


class AnswerParseError(ValueError):
    """The answer is not a mathematical object we can compare."""


@dataclass(frozen=True)
class Scalar:
    """A number or expression. ``value`` is a Fraction on the fast path, else SymPy.

    ``inexact``: written as a decimal, so it is compared with a tolerance.
    ``percent``: written with a % sign; 50% matches 50 and 0.5."""

    value: Fraction | sympy.Basic
    inexact: bool = False
    percent: bool = False


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Bracketed:
    """``(a, b)``, ``[a, b)``, ``\\{a, b\\}``…: tuples and intervals alike are ordered
    elements between two bracket characters; ``{`` means an unordered set."""

    open: str
    close: str
    items: tuple[Value, ...]


@dataclass(frozen=True)
class BareList:
    """``1, 2`` with no brackets: several answers, compared without order."""

    items: tuple[Value, ...]


@dataclass(frozen=True)
class UnionOf:
    parts: tuple[Value, ...]


@dataclass(frozen=True)
class Matrix:
    rows: tuple[tuple[Value, ...], ...]


@dataclass(frozen=True)
class Equation:
    """``lhs = rhs``; ``symbol`` is set when lhs is a lone variable (an assignment)."""

    lhs: Value
    rhs: Value
    symbol: str | None


@dataclass(frozen=True)
class Candidates:
    """``3 \\text{ or } 4``, ``\\pm 2``: more than one answer offered for one question."""

    items: tuple[Value, ...]


Value = Scalar | Text | Bracketed | BareList | UnionOf | Matrix | Equation | Candidates

# --- normalisation -------------------------------------------------------------------------

_REMOVE = [
    "\\left", "\\right", "\\bigl", "\\bigr", "\\Bigl", "\\Bigr", "\\big", "\\Big",
    "\\displaystyle", "\\textstyle", "\\!", "\\,", "\\;", "\\:", "\\quad", "\\qquad",
    "^\\circ", "^{\\circ}", "^{\\circ }", "\\circ", "°", "\\$", "$", "\\mathrm{ }",
]
_REPLACE = [
    ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"), ("{,}", ","),
    ("\\%", "%"), ("\\infinity", "\\infty"), ("\\le ", "\\leq "),
    ("\\ge ", "\\geq "), ("\\lbrace", "\\{"), ("\\rbrace", "\\}"), ("\\lbrack", "["),
    ("\\rbrack", "]"), ("\\times", " \\times "), ("\\cdot", " \\cdot "), ("−", "-"),
    ("\\neq", "\\ne"),
]
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_UNIT_WORDS = re.compile(r"^(.*?[\d.}])\s*(?:[a-zA-Z]{2,}\.?\s*)+$")
_MATH_WORDS = {"pi", "sin", "cos", "tan", "log", "ln", "sqrt", "infty", "inf", "exp",
               "sec", "csc", "cot", "arcsin", "arccos", "arctan", "frac", "cdot", "times"}


def normalize(text: str) -> str:
    s = text.strip()
    for old, new in _REPLACE:
        s = s.replace(old, new)
    for token in _REMOVE:
        s = s.replace(token, "")
    s = re.sub(r"(?<!\\)\\ ", " ", s)  # "\ " is a space, "\\ " a matrix row break
    s = s.strip().rstrip(".").strip()
    return _strip_groups(s)


def _strip_groups(s: str) -> str:
    """``{{5}}`` → ``5``: TeX groups around a whole answer mean nothing."""
    while s.startswith("{") and s.endswith("}") and _balanced(s[1:-1]):
        inner = s[1:-1].strip()
        if len(split_top(inner, ",")) > 1:
            break  # "{1, 2}": a set written without backslashes
        s = inner
    return s


def _strip_units(s: str) -> str:
    """``12 \\text{ cm}`` → ``12``; ``5 apples`` → ``5``; ``2 \\pi`` is left alone."""
    m = re.match(r"^(.*\S)\s*\\(?:text|mbox|mathrm)\s*\{\s*[a-zA-Z][a-zA-Z .^0-9/]*\}$", s)
    if m and re.search(r"[\d}]", m.group(1)):
        s = m.group(1).strip()
    m = _UNIT_WORDS.match(s)
    if m and "\\" not in s[m.end(1) :]:
        words = re.findall(r"[a-zA-Z]+", s[m.end(1) :])
        if words and not any(w.lower() in _MATH_WORDS for w in words):
            s = m.group(1).strip()
    return s


def nesting_depth(s: str) -> int:
    depth = best = 0
    for c in s:
        if c in "({[":
            depth += 1
            best = max(best, depth)
        elif c in ")}]":
            depth -= 1
    return best


# --- top-level splitting -------------------------------------------------------------------

_OPENERS = {"(": ")", "[": "]", "{": "}"}


def split_top(s: str, sep: str) -> list[str]:
    """Split on ``sep`` where no bracket is open (``\\{`` counts as a bracket)."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(s[start:])
    return parts


def _outer_brackets(s: str) -> tuple[str, str, str] | None:
    """``(open, close, inner)`` when one bracket pair encloses the whole string."""
    if s.startswith("\\{") and s.endswith("\\}"):
        inner = s[2:-2]
        if _balanced(inner):
            return "{", "}", inner
        return None
    if len(s) < 2 or s[0] not in "([{" or s[-1] not in ")]}":
        return None
    inner = s[1:-1]
    if not _balanced(inner):
        return None
    if s[0] == "{" and s[-1] != "}":
        return None
    return s[0], s[-1], inner


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


# --- numbers -------------------------------------------------------------------------------

_INT = re.compile(r"^[+-]?\d+$")
_DECIMAL = re.compile(r"^[+-]?(?:\d+\.\d*|\.\d+)$")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SLASH = re.compile(r"^([+-]?\d+)\s*/\s*([+-]?\d+)$")
_FRAC = re.compile(r"^([+-]?)\\frac(?:\{\s*([+-]?\d+)\s*\}|(\d))(?:\{\s*(\d+)\s*\}|(\d))$")
_SCI = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))\s*(?:\\times|\\cdot|\*)\s*10\s*\^\s*\{?\s*([+-]?\d+)\s*\}?$"
)
_E_NOTATION = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))[eE]([+-]?\d+)$")
_MAX_EXPONENT = 400  # 1e400 is a number; 1e99999999 is a memory attack on Fraction


def parse_number(s: str) -> Scalar | None:
    """The fast path: plain numbers never reach SymPy."""
    s = s.replace(" ", "")
    if _INT.match(s):
        return Scalar(Fraction(int(s)))
    if _DECIMAL.match(s):
        return Scalar(Fraction(s), inexact=True)
    if _THOUSANDS.match(s):
        plain = s.replace(",", "")
        return Scalar(Fraction(plain), inexact="." in plain)
    m = _SLASH.match(s)
    if m and int(m.group(2)) != 0:
        return Scalar(Fraction(int(m.group(1)), int(m.group(2))))
    m = _FRAC.match(s)
    if m:
        num = int(m.group(2) or m.group(3))
        den = int(m.group(4) or m.group(5))
        if den != 0:
            return Scalar(Fraction(-num if m.group(1) == "-" else num, den))
    m = _SCI.match(s) or _E_NOTATION.match(s)
    if m and abs(int(m.group(2))) > _MAX_EXPONENT:
        raise AnswerParseError(f"exponent {m.group(2)} is out of range")
    if m:
        return Scalar(Fraction(m.group(1)) * Fraction(10) ** int(m.group(2)), inexact=True)
    return None


# --- SymPy path ----------------------------------------------------------------------------

_L2S_NORMALIZATION = NormalizationConfig(
    basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="none",
    equations=False,
)


def _parse_latex(s: str) -> sympy.Basic:
    try:
        expr = latex2sympy(s, normalization_config=_L2S_NORMALIZATION)
    except RecursionError as exc:
        raise AnswerParseError("expression nests too deeply") from exc
    except Exception as exc:  # the ANTLR parser raises many types; all mean "not LaTeX math"
        raise AnswerParseError(f"cannot parse {s[:80]!r}: {type(exc).__name__}") from exc
    if isinstance(expr, list | tuple):
        raise AnswerParseError(f"cannot parse {s[:80]!r}: several expressions")
    return expr


def parse_scalar(s: str) -> Value:
    s = _strip_units(s).strip()
    if not s:
        raise AnswerParseError("empty answer")
    percent = s.endswith("%")
    if percent:
        s = s[:-1].strip()
    number = parse_number(s)
    if number is not None:
        return Scalar(number.value, number.inexact, percent)
    if s.startswith("(") and s.endswith(")") and _balanced(s[1:-1]):
        return parse_scalar(s[1:-1] + ("%" if percent else ""))
    expr = _parse_latex(s)
    inexact = bool(re.search(r"\d\.\d", s))
    return Scalar(expr, inexact, percent)


# --- the answer ----------------------------------------------------------------------------

_CANDIDATE_WORDS = re.compile(r"\s(?:or|and)\s|\\lor|\\vee")
_ASSIGNEE = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?'*$|^\\[a-zA-Z]+$")
_MATRIX = re.compile(r"^\\begin\{([pbvBV]?matrix|array)\}(?:\{[^{}]*\})?(.*)\\end\{\1\}$", re.S)


def parse_answer(raw: str) -> Value:
    """Parse an answer string into a Value; AnswerParseError when it is not one."""
    s = normalize(raw)
    if not s:
        raise AnswerParseError("empty answer")
    if nesting_depth(s) > MAX_NESTING:
        raise AnswerParseError(f"brackets nest deeper than {MAX_NESTING}")
    return _parse(s)


def _parse(s: str) -> Value:
    s = s.strip()
    # "3 \text{ or } 4": the text command is gone before we look for the word
    plain = _TEXT_CMD.sub(lambda m: f" {m.group(1).strip()} ", s)
    if _CANDIDATE_WORDS.search(f" {plain} "):
        parts = re.split(_CANDIDATE_WORDS, f" {plain} ")
        items = tuple(_parse(p) for p in parts if p.strip() and p.strip() != ",")
        return Candidates(items) if len(items) > 1 else items[0]

    text = _as_text(s)
    if text is not None:
        return text

    membership = split_top(s, "\\in ") if "\\in " in s else [s]
    if len(membership) == 2 and _ASSIGNEE.match(membership[0].strip()):
        s = membership[1].strip()  # "x \in [0, 1]" answers "[0, 1]"
    equation = split_top(s, "=")
    if len(equation) > 1 and all(p.strip() for p in equation):
        lhs, rhs = equation[-2].strip(), equation[-1].strip()
        if any(op in lhs or op in rhs for op in ("<", ">", "\\leq", "\\geq")):
            return Scalar(_parse_latex(s))
        symbol = lhs if _ASSIGNEE.match(lhs) else None
        return Equation(_parse(lhs), _parse(rhs), symbol)

    union = split_top(s, "\\cup")
    if len(union) > 1:
        return UnionOf(tuple(_parse(p) for p in union))

    m = _MATRIX.match(s)
    if m:
        rows = [r for r in re.split(r"\\\\", m.group(2)) if r.strip() and r.strip() != "\\hline"]
        return Matrix(tuple(tuple(_parse(c) for c in split_top(r, "&")) for r in rows))

    brackets = _outer_brackets(s)
    if brackets is not None:
        open_, close, inner = brackets
        items = split_top(inner, ",")
        if len(items) > 1 or open_ == "{" and s.startswith("\\{"):
            return Bracketed(open_, close, tuple(_parse(i) for i in items if i.strip()))

    if s.count("\\pm") == 1:
        plus, minus = s.replace("\\pm", "+"), s.replace("\\pm", "-")
        if s.strip().startswith("\\pm"):
            plus = plus.lstrip().lstrip("+")
        return Candidates((_parse(plus), _parse(minus)))

    items = split_top(s, ",")
    if len(items) > 1 and not _THOUSANDS.match(s.replace(" ", "")):
        return BareList(tuple(_parse(i) for i in items if i.strip()))
    return parse_scalar(s)


_TEXT_ONLY = re.compile(r"^\\(?:text|textbf|textit|mathrm|mbox)\s*\{([^{}]*)\}$")
_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")


def _as_text(s: str) -> Text | Scalar | None:
    """A worded answer ("\\text{Monday}", "(C)") compares as lower-case text."""
    m = _TEXT_ONLY.match(s)
    if m:
        inner = m.group(1).strip()
        choice = _CHOICE.match(inner)
        if choice:
            return Text(choice.group(1).lower())
        try:
            value = _parse(inner)
        except AnswerParseError:
            return Text(" ".join(inner.lower().split()))
        return value if not isinstance(value, Scalar) or _is_numeric(value) else Text(
            " ".join(inner.lower().split())
        )
    m = _CHOICE.match(s)
    if m and s.startswith("("):
        return Text(m.group(1).lower())
    if re.fullmatch(r"[A-Za-z][A-Za-z' ]*[A-Za-z]", s) and " " in s.strip() or (
        re.fullmatch(r"[A-Za-z]{3,}", s) and s.lower() not in _MATH_WORDS
    ):
        return Text(" ".join(s.lower().split()))
    return None


def _is_numeric(value: Scalar) -> bool:
    return isinstance(value.value, Fraction) or not value.value.free_symbols


@lru_cache(maxsize=4096)
def parse_gold(raw: str) -> Value:
    """Reference answers repeat G times in a group; parse each once per worker."""
    return parse_answer(raw)
