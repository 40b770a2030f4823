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


def warm_up() -> None:
    """Import and exercise SymPy and the LaTeX parser so the first real item is not slow."""
    check("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2", 1e-6)
    check("(1, 2]", "(1,2]", 1e-6)
