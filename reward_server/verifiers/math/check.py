"""The unit of work a math worker process runs: parse both answers and compare them.

Runs inside a pool worker under a wall-clock timeout and a memory cap, so nothing here
needs to defend against slow or huge SymPy evaluations: the pool kills the worker."""

from __future__ import annotations

from typing import NamedTuple

from reward_server.verifiers.math.equivalence import equivalent
from reward_server.verifiers.math.values import AnswerParseError, parse_answer, parse_gold


class Verdict(NamedTuple):
    correct: bool
    status: str  # "ok" | "parse_error"
    detail: str | None


def check(extracted: str, gold: str, tolerance: float) -> Verdict:
    try:
        gold_value = parse_gold(gold)
    except AnswerParseError as exc:
        return Verdict(False, "parse_error", f"reference answer: {exc}")
    try:
        pred_value = parse_answer(extracted)
    except AnswerParseError as exc:
        return Verdict(False, "parse_error", str(exc))
    try:
        correct = equivalent(gold_value, pred_value, tolerance)
    except RecursionError:
        return Verdict(False, "parse_error", "expression nests too deeply")
    except Exception as exc:  # SymPy raises arbitrary types on exotic input
        return Verdict(False, "parse_error", f"cannot compare: {type(exc).__name__}: {exc}"[:200])
    return Verdict(correct, "ok", None if correct else "not equivalent to the reference")


# Typical answer shapes. ANTLR's parser builds its prediction tables lazily, so the first
# parse of each shape costs several times a later one; pay that at worker start instead.
_WARM_UP_PAIRS = [
    ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"), ("(1, 2]", "(1,2]"), ("x^2+2x+1", "(x+1)^2"),
    ("(x-2)(x+3)", "x^2+x-6"), ("2\\sqrt{3}", "\\sqrt{12}"), ("\\frac{\\pi}{3}", "\\pi/3"),
    ("e^{2}", "e^2"), ("y = 2x + 1", "y=1+2x"), ("10^6", "1000000"), ("\\sqrt[3]{8}", "2"),
    ("2\\frac{1}{2}", "\\frac{5}{2}"), ("\\frac{a}{b}", "a/b"), ("\\log_2 8", "3"),
    ("\\sin^2 x + \\cos^2 x", "1"), ("3^{2}", "9"), ("\\binom{5}{2}", "10"),
    ("\\frac{3}{2\\sqrt{3}}", "\\frac{\\sqrt3}{2}"), ("-\\frac{\\sqrt{5}}{5}", "-1/\\sqrt5"),
    ("4\\pi r^2", "4\\pi r^{2}"), ("x \\le 3", "3 \\ge x"), ("|x-1|", "|1-x|"),
]


def warm_up() -> None:
    """Import and exercise SymPy and the LaTeX parser so the first real items are not slow."""
    for pred, gold in _WARM_UP_PAIRS:
        check(pred, gold, 1e-6)
