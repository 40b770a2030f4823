"""What keeps reasoning-gym's own scorers from running the model's answer as code.

Several of the library's ``score_answer`` methods hand the answer to Python: ``eval(answer)``
(string_insertion, spiral_matrix, binary_matrix, n_queens: to read a list literal) and SymPy's
``parse_expr`` / ``sympify`` (countdown, puzzle24, polynomial_multiplication, the integration
tasks, ...), which end in ``eval`` of the text after a light rewrite. An answer such as
``__import__('os').system(...)`` would run in the scoring process, and could patch the scorer
to pay every later answer: a forged reward. So the scoring worker installs two guards before
any task is scored (``install``):

- each reasoning-gym module's ``eval`` is ``safe_eval``: a Python literal, or integer
  arithmetic (the library's own generators and scorers evaluate those), and nothing else;
- SymPy's ``stringify_expr``, the step every string-to-expression path goes through before
  ``eval``, refuses code that is not a plain expression: numbers, symbols, operators, and
  calls of SymPy's own expression classes and functions. No attribute, subscript, lambda,
  comprehension, or name that starts with ``_``; no call of ``sympify``, ``S``, ``lambdify``
  or a builtin other than a few numeric ones.

A refused answer raises ``UnsafeAnswer`` (a ``ValueError``), which the library's scorers
already read as an answer they cannot parse.
``tests/reward_server/verifiers/reasoning_gym/test_reasoning_gym_guard.py`` lists every
``eval``/``exec``/``parse_expr``/``sympify`` site of the pinned library, so a new version's
must be read before the pin moves.
"""

from __future__ import annotations

import ast
import keyword
import re
import sys
from collections.abc import Callable
from typing import Any

MAX_SHIFT = 4096  # bits an integer may be shifted by in safe_eval (1 << 10**9 is 125 MB)
MAX_CODE_CHARS = 20_000  # an answer longer than this is not an expression worth parsing


class UnsafeAnswer(ValueError):
    """Text that would run as code: refused before it reaches ``eval``."""


class RestatedQuestion(UnsafeAnswer):
    """An answer that is the question's operation unevaluated (``UNEVALUATED``)."""


_INT_OPS: dict[type[ast.AST], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b,
    ast.BitXor: lambda a, b: a ^ b,
    ast.LShift: lambda a, b: a << _shift(b), ast.RShift: lambda a, b: a >> _shift(b),
}


def _shift(bits: int) -> int:
    if not 0 <= bits <= MAX_SHIFT:
        raise UnsafeAnswer(f"a shift by {bits} bits")
    return bits


def _integer_arithmetic(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _integer_arithmetic(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Invert):
        value = _integer_arithmetic(node.operand)
        return -value if isinstance(node.op, ast.USub) else ~value if isinstance(
            node.op, ast.Invert) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        return _INT_OPS[type(node.op)](_integer_arithmetic(node.left),
                                       _integer_arithmetic(node.right))
    raise UnsafeAnswer(f"not a literal or integer arithmetic: {type(node).__name__}")


def safe_eval(source: Any, *_: Any) -> Any:
    """``eval`` for the library's modules: a Python literal (``ast.literal_eval``) or integer
    arithmetic (``+ - * // % & | ^ << >> ~``), else ``UnsafeAnswer``."""
    if not isinstance(source, str):
        raise UnsafeAnswer("only text is evaluated")
    if len(source) > MAX_CODE_CHARS:
        raise UnsafeAnswer(f"longer than {MAX_CODE_CHARS} characters")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, MemoryError, RecursionError) as exc:
        raise UnsafeAnswer(f"not an expression: {exc}") from None
    try:
        return ast.literal_eval(tree)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _integer_arithmetic(tree)


# Builtins a SymPy expression may call: numeric conversions, nothing that reaches objects.
_NUMERIC_BUILTINS = frozenset({"abs", "int", "float", "round", "pow", "complex", "bool"})
# SymPy names that turn text into code, or run it (DeferredVector's name is written into
# the source lambdify execs, which evalf of a Sum reaches through hypsum).
_REFUSED_CALLS = frozenset({"sympify", "S", "lambdify", "parse_expr", "var", "symbols",
                            "preview", "init_printing", "plot", "exec", "eval", "compile",
                            "evaluate", "Function", "DeferredVector", "IndexedBase", "Idx",
                            "Indexed", "MatrixSymbol", "Dummy", "Wild", "WildFunction"})
# The question's own operation left unevaluated: an answer ``Integral(f, x)`` to "integrate
# f" differentiates back to f, and ``Derivative``/``Sum``/``Limit``... restate a question the
# same way. No task asks for one, so none is an answer (the restated-question rule the math
# verifier applies to a copied expression).
UNEVALUATED = frozenset({"Integral", "Derivative", "Sum", "Product", "Limit", "Subs",
                         "Lambda", "Order", "O", "UnevaluatedExpr"})
# A string in the code SymPy's parser evals is a symbol's name or a number's digits, as its
# transformations write them (``Symbol('x')``, ``Float('1.5')``): the printers write a name
# into source that lambdify execs, so a name is an identifier and nothing else.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_DIGITS = re.compile(r"(?=\.?[0-9])[0-9]{0,4300}(?:\.[0-9]{0,4300})?(?:[eE][+-]?[0-9]{1,5})?")
_EXPRESSION_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call, ast.Name,
    ast.Constant, ast.Tuple, ast.List, ast.Set, ast.keyword, ast.Load, ast.operator,
    ast.unaryop, ast.boolop, ast.cmpop,
)


def _callable_names() -> frozenset[str]:
    """SymPy's expression classes and functions, by the names ``from sympy import *`` binds:
    a class that derives from ``Basic``, or a function defined in ``sympy.functions`` (sqrt,
    root, ...). Not the helpers of ``sympy.core``: ``seterr`` there changes how every later
    division is evaluated in the worker."""
    import sympy
    from sympy import Basic

    names = set()
    for name in getattr(sympy, "__all__", ()):
        obj = getattr(sympy, name, None)
        module = getattr(obj, "__module__", "") or ""
        if isinstance(obj, type) and issubclass(obj, Basic):
            names.add(name)
        elif callable(obj) and module.startswith("sympy.functions"):
            names.add(name)
    return frozenset(names - _REFUSED_CALLS)


def check_expression_code(code: str, callable_names: frozenset[str]) -> None:
    """``UnsafeAnswer`` unless ``code`` (what SymPy's parser will ``eval``) is a plain
    expression, as the module docstring says."""
    if len(code) > MAX_CODE_CHARS * 4:
        raise UnsafeAnswer("too long to be an expression")
    try:
        tree = ast.parse(code, mode="eval")
    except (SyntaxError, MemoryError, RecursionError) as exc:
        raise UnsafeAnswer(f"not an expression: {exc}") from None
    # a string is an argument of a call (Symbol('x')), never an operand: 'x' + '=' builds
    # what no single constant may be
    arguments = {id(a) for call in ast.walk(tree) if isinstance(call, ast.Call)
                 for a in [*call.args, *(k.value for k in call.keywords)]}
    for node in ast.walk(tree):
        if not isinstance(node, _EXPRESSION_NODES):
            raise UnsafeAnswer(f"{type(node).__name__} is not part of an expression")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise UnsafeAnswer(f"the name {node.id!r}")
        if isinstance(node, ast.Constant):
            _check_constant(node.value, id(node) in arguments)
        if isinstance(node, ast.keyword) and (node.arg is None or node.arg.startswith("_")):
            raise UnsafeAnswer("a ** or private keyword argument")
        if isinstance(node, ast.Call):
            func = node.func
            if not isinstance(func, ast.Name):
                raise UnsafeAnswer("a call of something other than a name")
            if func.id in UNEVALUATED:
                raise RestatedQuestion(f"{func.id} left unevaluated is not an answer")
            if func.id not in callable_names and func.id not in _NUMERIC_BUILTINS:
                raise UnsafeAnswer(f"a call of {func.id!r}")


def _check_constant(value: Any, argument: bool) -> None:
    if type(value) in (int, float, complex, bool) or value is None:
        return
    if type(value) is str and argument and (_DIGITS.fullmatch(value) or (
            _NAME.fullmatch(value) and not keyword.iskeyword(value))):
        return
    raise UnsafeAnswer(f"the constant {str(value)[:40]!r} is neither a name nor a number")


def _guarded_stringify(original: Callable[..., str], callable_names: frozenset[str]
                       ) -> Callable[..., str]:
    def stringify_expr(s: str, *args: Any, **kwargs: Any) -> str:
        code = original(s, *args, **kwargs)
        check_expression_code(code, callable_names)
        return code

    stringify_expr.guarded = True  # type: ignore[attr-defined]
    return stringify_expr


class _Installed:
    modules = -1  # len(sys.modules) when the modules were last guarded


def install() -> None:
    """Guard this process (a scoring worker): SymPy's parser, and every reasoning-gym module
    imported so far. Idempotent: run again before each chunk is scored, for a module a
    scorer imported late. Cheap when no module was imported since: a sandbox's chunk
    process, forked from a guarded server, would otherwise copy every page the walk over
    ``sys.modules`` touches (~6 ms a chunk)."""
    import reasoning_gym  # noqa: F401  (imports every task module)
    from sympy.parsing import sympy_parser

    if not getattr(sympy_parser.stringify_expr, "guarded", False):
        sympy_parser.stringify_expr = _guarded_stringify(sympy_parser.stringify_expr,
                                                         _callable_names())
    if len(sys.modules) == _Installed.modules:
        return
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "reasoning_gym" or name.startswith("reasoning_gym.")):
            module.eval = safe_eval  # type: ignore[attr-defined]  # shadows the builtin
            module.exec = _refuse_exec  # type: ignore[attr-defined]
    _Installed.modules = len(sys.modules)


def _refuse_exec(*_: Any, **__: Any) -> None:
    raise UnsafeAnswer("exec is not run while scoring")
