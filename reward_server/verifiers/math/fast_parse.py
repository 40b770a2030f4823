"""Two-stage ANTLR parsing for math-verify's LaTeX parser (latex2sympy2_extended).

Profiled on Math-Verify's own suite in a warm worker, most of an item's time is ANTLR's
full-context (LL) prediction, which its DFA cache does not keep. ANTLR's documented remedy
is two-stage parsing: parse in SLL mode first, and only when that reports a syntax error
parse again in LL mode. ANTLR's guarantee (``PredictionMode.SLL``): an SLL parse either
returns the same tree LL would, or reports a syntax error; so the verdicts do not change,
only the time (the suite and the 199-case table check it). latex2sympy's error listener
raises on any syntax error, which is the signal to fall back.
"""

from __future__ import annotations

from typing import Any

from antlr4.atn.PredictionMode import PredictionMode
from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

_create_parser = _Latex2Sympy.create_parser
_parse = _Latex2Sympy.parse
_sll = [False]  # per process: the workers run one task at a time, on their main thread


def _create_parser_in_mode(self: _Latex2Sympy, latex_str: str) -> Any:
    parser = _create_parser(self, latex_str)
    if _sll[0]:
        parser._interp.predictionMode = PredictionMode.SLL
    return parser


def _two_stage_parse(self: _Latex2Sympy, latex_str: str) -> Any:
    outer = _sll[0]
    _sll[0] = True
    try:
        return _parse(self, latex_str)
    except Exception:  # a syntax error (perhaps SLL's only) or a conversion error
        pass
    finally:
        _sll[0] = outer
    _sll[0] = False
    try:
        return _parse(self, latex_str)  # LL: the reference behaviour, errors included
    finally:
        _sll[0] = outer


def install() -> None:
    """Route latex2sympy's parser through the two stages (idempotent)."""
    _Latex2Sympy.create_parser = _create_parser_in_mode  # type: ignore[method-assign]
    _Latex2Sympy.parse = _two_stage_parse  # type: ignore[method-assign]
