"""Answers that run as code in reasoning_gym's own scorers, and the tasks whose scorers would
run them: one list for the guard's tests (tests/reward_server/verifiers/reasoning_gym/) and
the sandbox's (tests/sandbox/test_scorer_isolation.py), so both hold against the same."""

from __future__ import annotations

# Each would leave a file at ``{marker}`` behind in whatever process ran it: eval of the
# answer in four tasks, SymPy's parse_expr (which ends in eval) in five
PAYLOADS = [
    "__import__('os').system('touch {marker}')",
    "open('{marker}', 'w').write('x')",
    "[__import__('os').system('touch {marker}') for _ in [1]]",
    "getattr(__import__('os'), 'system')('touch {marker}')",
    "(lambda: __import__('os').system('touch {marker}'))()",
    "sympify(\"__import__('os').system('touch {marker}')\")",
    "S(\"__import__('os').system('touch {marker}')\")",
    "lambdify([], \"__import__('os').system('touch {marker}')\")()",
]
EVAL_TASKS = ["string_insertion", "spiral_matrix", "binary_matrix", "n_queens", "countdown",
              "puzzle24", "polynomial_multiplication", "simple_integration",
              "intermediate_integration"]
