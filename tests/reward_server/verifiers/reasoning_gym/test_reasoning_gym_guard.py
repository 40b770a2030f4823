"""The guard that keeps reasoning-gym's scorers from running an answer as code (pure: no
server). The library's own call sites are listed, so a new version's are read before the
pin moves."""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reward_server.verifiers.reasoning_gym.guard import (
    UnsafeAnswer,
    check_expression_code,
    safe_eval,
)

reasoning_gym = pytest.importorskip("reasoning_gym")

# Every place the pinned library (0.1.25) turns text into code, and how often. Each one was
# read: the evals and SymPy parses reach the answer or the entry, and are guarded; exec and
# compile build the datasets (codeio's programs, bf's compiler), never score.
CALL_SITES = {
    ("algebra/intermediate_integration.py", "parse_expr"): 2,
    ("algebra/intermediate_integration.py", "simplify"): 1,
    ("algebra/polynomial_multiplication.py", "parse_expr"): 2,
    ("algebra/simple_integration.py", "parse_expr"): 2,
    ("algebra/simple_integration.py", "simplify"): 1,
    ("algorithmic/binary_matrix.py", "eval"): 1,
    ("algorithmic/number_sorting.py", "eval"): 1,
    ("algorithmic/spiral_matrix.py", "eval"): 1,
    ("algorithmic/string_insertion.py", "eval"): 1,
    ("arithmetic/basic_arithmetic.py", "eval"): 1,
    ("arithmetic/bitwise_arithmetic.py", "eval"): 2,
    ("arithmetic/gsm_symbolic/generators_00_49.py", "eval"): 1,
    ("arithmetic/gsm_symbolic/generators_50_99.py", "eval"): 1,
    ("code/codeio.py", "exec"): 1,
    ("code/contrib/bfit/Compiler/Compiler.py", "compile"): 2,
    ("games/countdown.py", "parse_expr"): 1,
    ("games/n_queens.py", "eval"): 1,
    ("games/puzzle24.py", "parse_expr"): 1,
    ("logic/propositional_logic.py", "parse_expr"): 6,
    ("logic/propositional_logic.py", "simplify"): 4,
}
_CALL = re.compile(r"(?<![\w.])(eval|exec|compile|parse_expr|sympify|lambdify|S|parse_latex|"
                   r"__import__)\(|\.(parse_expr|sympify|lambdify|simplify)\(")


def test_the_librarys_code_from_text_sites_are_the_ones_read() -> None:
    root = Path(reasoning_gym.__file__).parent
    found: collections.Counter[tuple[str, str]] = collections.Counter()
    for path in sorted(root.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for match in _CALL.finditer(line.split("#")[0]):
                found[(str(path.relative_to(root)), match.group(1) or match.group(2))] += 1
    assert dict(found) == CALL_SITES


@pytest.mark.parametrize(("text", "value"), [
    ("['a', 'b']", ["a", "b"]), ("[[1, 0], [0, 1]]", [[1, 0], [0, 1]]), ("-3", -3),
    ("(0x3a + 0x1f) >> 2", (0x3a + 0x1f) >> 2), ("12 // 5 * 3 - 7 % 4", 12 // 5 * 3 - 7 % 4),
    ("~5 ^ 3 | 8 & 12", ~5 ^ 3 | 8 & 12), ("1 << 4096", 1 << 4096),
])
def test_safe_eval_reads_literals_and_integer_arithmetic(text: str, value: object) -> None:
    assert safe_eval(text) == value


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "open('/etc/passwd').read()", "[x for x in (1,)]",
    "(lambda: 1)()", "().__class__", "1 << 100000", "2 ** 10", "x", "f(1)", "'a' * 10",
    "1" * 30_000, "[" * 5000 + "]" * 5000, 5,
])
def test_safe_eval_refuses_everything_else(text: object) -> None:
    with pytest.raises(UnsafeAnswer):
        safe_eval(text)


NAMES = frozenset({"Symbol", "Integer", "Float", "sqrt", "Rational", "exp"})


@pytest.mark.parametrize("code", [
    "Symbol ('x' )**Integer (2 )+Integer (1 )", "sqrt(Integer(2)) * Rational(1, 2)",
    "Float('1.5') > Symbol('y')", "abs(Integer(-1))", "(Symbol('a'), Symbol('b'))",
])
def test_expressions_pass_the_parser_guard(code: str) -> None:
    check_expression_code(code, NAMES)


@pytest.mark.parametrize("code", [
    "__import__('os').system('true')", "Symbol('x').__class__", "getattr(Symbol, 'x')",
    "sympify('1')", "S('1')", "(lambda: 1)()", "[i for i in (1,)]", "Symbol('x')[0]",
    "open('/etc/passwd')", "exec('1')", "eval('1')", "f(**{'a': 1})", "Symbol(_x)",
])
def test_code_does_not(code: str) -> None:
    with pytest.raises(UnsafeAnswer):
        check_expression_code(code, NAMES)


def test_sympys_own_names_that_change_state_are_not_callable() -> None:
    from reward_server.verifiers.reasoning_gym.guard import _callable_names

    names = _callable_names()
    assert {"sqrt", "Rational", "Integer", "Symbol", "factorial", "Max"} <= names
    for code in ("seterr(True)", "init_session()", "var('x')", "lambdify(Symbol('x'), 1)"):
        with pytest.raises(UnsafeAnswer):
            check_expression_code(code, names)


def test_the_installed_guard_covers_every_sympy_string_path() -> None:
    """In a fresh process (the guard patches the process for good): sympify, S, parse_expr and
    simplify of a string all refuse code once the guard is in, and all ran it before."""
    probe = (
        "import os, sys, tempfile\n"
        "import sympy\n"
        "from sympy.parsing.sympy_parser import parse_expr\n"
        "marker = tempfile.mktemp()\n"
        "code = f\"__import__('os').system('touch {marker}')\"\n"
        "def ran(fn):\n"
        "    try:\n"
        "        fn(code)\n"
        "    except Exception:\n"
        "        pass\n"
        "    out = os.path.exists(marker)\n"
        "    if out: os.remove(marker)\n"
        "    return out\n"
        "fns = [sympy.sympify, sympy.S, parse_expr, sympy.simplify]\n"
        "before = [ran(f) for f in fns]\n"
        "from reward_server.verifiers.reasoning_gym import guard\n"
        "guard.install()\n"
        "after = [ran(f) for f in fns]\n"
        "assert sympy.sympify('2*x + 1') == 2 * sympy.Symbol('x') + 1\n"
        "print(before, after)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[True, True, True, True] [False, False, False, False]"


def _in_fresh_worker(body: str) -> str:
    """``body`` after the guard is installed, in a process of its own (the guard patches the
    process for good); its stdout."""
    probe = (
        "import os, sys, tempfile\n"
        "from reward_server.verifiers.reasoning_gym import guard, library\n"
        "guard.install()\n" + body
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


# A name SymPy writes into source that lambdify execs: evalf of a Sum (hypsum), round() and
# Max() of one reach it. Each {name} is a string that is Python, not a name.
NAME_PAYLOADS = [
    "Sum(2**(-DeferredVector({name})), (DeferredVector({name}), 0, oo)) > 0",
    "Sum(2**(-Symbol({name})), (Symbol({name}), 0, oo)) > 0",
    "round(Sum(2**(-Symbol({name})), (Symbol({name}), 0, oo)), 3)",
    "Max(Sum(1/Symbol({name})**2, (Symbol({name}), 1, oo)), 1)",
    "Sum(2**(-DeferredVector({name})), (DeferredVector({name}), 0, oo)) + x",
]


@pytest.mark.slow
def test_names_that_are_python_do_not_run_in_any_sympy_task() -> None:
    """Each payload to each task whose scorer parses with SymPy: the Python in the name never
    runs (it would create a file), and the task scores it as an answer it cannot read."""
    body = (
        "import json\n"
        "marker = tempfile.mktemp()\n"
        f"payloads = {NAME_PAYLOADS!r}\n"
        "name = repr(f\"x=(__import__('os').system('touch {marker}'))\")\n"
        "seen = {}\n"
        "for task in ('polynomial_multiplication', 'simple_integration',\n"
        "             'intermediate_integration', 'countdown', 'puzzle24'):\n"
        "    import reasoning_gym\n"
        "    entry = reasoning_gym.create_dataset(task, size=1, seed=3)[0]\n"
        "    for p in payloads:\n"
        "        status, score, _ = library.score_one(task, p.format(name=name), entry)\n"
        "        seen[f'{task} {payloads.index(p)}'] = [status, score, os.path.exists(marker)]\n"
        "print(json.dumps(seen))\n"
    )
    import json

    seen = json.loads(_in_fresh_worker(body))
    assert len(seen) == 5 * len(NAME_PAYLOADS)
    for key, (status, score, ran) in seen.items():
        assert not ran, key
        assert status == "ok" and score < 1.0, (key, status, score)


@pytest.mark.slow
def test_the_question_restated_unevaluated_scores_zero() -> None:
    """``Integral(<integrand>, x)`` differentiates back to the integrand, which the library's
    integration scorers check: paid 1 in-process, 0 here; the antiderivative still scores 1.
    (About one intermediate_integration entry in eight has an unevaluated Integral as its
    own answer, where SymPy found no closed form: that answer scores 0 here too.)"""
    body = (
        "import json, reasoning_gym, sympy\n"
        "x = sympy.Symbol('x')\n"
        "out = {}\n"
        "for task in ('simple_integration', 'intermediate_integration'):\n"
        "    entry = next(e for e in reasoning_gym.create_dataset(task, size=20, seed=5)\n"
        "                 if 'Integral' not in e['answer'])\n"
        "    integrand = entry['metadata']['integrand']\n"
        "    restated = [f'Integral({integrand}, x)', f'Integral({integrand}, x) + 7',\n"
        "                f'Derivative(Integral(Integral({integrand}, x), x), x)']\n"
        "    out[task] = {'restated': [library.score_one(task, r, entry)[1] for r in restated],\n"
        "                 'own': library.score_one(task, entry['answer'], entry)[1]}\n"
        "print(json.dumps(out))\n"
    )
    import json

    out = json.loads(_in_fresh_worker(body))
    for task, scores in out.items():
        assert scores["own"] == 1.0, task
        assert max(scores["restated"]) == 0.0, (task, scores)


@pytest.mark.parametrize("code", [
    "Symbol('x=(1)')", "Float('1.5; import os')", "Symbol('lambda')", "Symbol(b'x')",
    "Symbol('x' * 3)", "Integral(Symbol('x'), Symbol('x'))",
])
def test_strings_that_are_not_names_or_numbers_are_refused(code: str) -> None:
    with pytest.raises(UnsafeAnswer):
        check_expression_code(code, NAMES | {"Integral"})
