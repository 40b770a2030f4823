"""Two-stage parsing (SLL, then LL) gives latex2sympy's LL trees: the same SymPy values for
answer shapes of every kind, and the same errors for text that is not LaTeX math."""

from __future__ import annotations

import pytest
from latex2sympy2_extended.latex2sympy2 import latex2sympy

from reward_server.verifiers.math import fast_parse

fast_parse.install()

SHAPES = [
    "\\frac{\\sqrt{2}}{2}", "(1, 2]", "x^2+2x+1", "y = 2x + 1", "\\{1, 2\\}", "3.14",
    "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "0<f(x)<1", "1\\leq|z|\\leq\\frac32",
    "(-\\infty, 3] \\cup (5, \\infty)", "\\sin^2 x + \\cos^2 x", "\\int_0^1 x\\,dx",
    "\\sum_{k=1}^{n} k", "x \\neq 3", "(p,q)=(3,2)", "a_{1}+a_{2}", "2\\sqrt{3}i",
    "\\log_2 8", "f'(x)", "|x-1|", "3!", "\\binom{5}{2}", "e^{i\\pi}", "7,425,000",
]


def _ll(text: str) -> str:
    """latex2sympy as shipped: LL prediction only."""
    fast_parse._sll[0] = False
    original = fast_parse._Latex2Sympy.parse
    fast_parse._Latex2Sympy.parse = fast_parse._parse  # type: ignore[method-assign]
    fast_parse._Latex2Sympy.create_parser = fast_parse._create_parser  # type: ignore[method-assign]
    try:
        return _outcome(text)
    finally:
        fast_parse._Latex2Sympy.parse = original  # type: ignore[method-assign]
        fast_parse.install()


def _outcome(text: str) -> str:
    try:
        return repr(latex2sympy(text))
    except Exception as exc:
        return f"error: {type(exc).__name__}"


@pytest.mark.parametrize("text", [*SHAPES, "\\frac{1}{", "x +* 2", "\\begin{pmatrix}1&"])
def test_two_stage_equals_ll(text: str) -> None:
    assert _outcome(text) == _ll(text)


def test_install_routes_through_sll() -> None:
    seen: list[object] = []
    create = fast_parse._create_parser

    def spy(self: object, latex_str: str) -> object:
        parser = create(self, latex_str)  # type: ignore[arg-type]
        seen.append(fast_parse._sll[0])
        return parser

    fast_parse._create_parser = spy  # type: ignore[assignment]
    try:
        latex2sympy("x^2+1")
    finally:
        fast_parse._create_parser = create
    assert seen and seen[0] is True and fast_parse._sll[0] is False
