"""Turns of an assertion job, and the clock on its trusted code.

A stdin/stdout item's tests share nothing, so one that outlasts its turn while other items
wait simply stops between two tests and the host runs the rest in another turn (often in
another container). An assertion job's tests share two things: the trusted test namespace
(what ``test_setup`` and the test code's statements built, and what a test's own expression
changed) and the solution's process (its module state). A later turn cannot have either:
the container is swept and given to whoever waits, since two callers' processes never share
one. So the harness keeps the state while it can and gives it up only where nothing is lost:

- **In process while nobody waits.** Past its turn, between two tests, the job asks the host
  whether other items wait (``ask``); if none do, it goes on in the same process, state and
  all. Only when they do does it end the turn.
- **Only where a later turn is exact** (``resumable``): every step after the solution loaded
  is a test that cannot change what a later test sees in the trusted namespace (``inert``):
  a call-based test, or an assert that reads only the solution's functions (called with
  values, which travel by copy), pure builtins and modules, and plain data it does not
  touch through a method. A later turn then rebuilds the namespace by running the setup
  again, loads the solution afresh and skips the tests that ran. The solution's own module
  state is the one thing that does not carry over; a correct solution does not depend on
  it (each of MBPP's, APPS's and LiveCodeBench's tests stands alone).
- **Else in one turn, at most one test's longest limit long** (``unsplit_s``): test code
  that binds names between its tests, calls its own helpers or mutates its data could only
  be resumed by running its earlier tests again, whose time is the caller's to choose. It
  is bounded as one test is, so it holds a container no longer than any single test may.

Trusted code has a clock too (``trusted_clock``): a test's own expression, ``test_setup``
and the test code's statements run in this process, and a loop there would otherwise hold
the container until the host gave up on it.
"""

from __future__ import annotations

import ast
import builtins
import signal
import time
import types
from contextlib import contextmanager

from .candidate import CandidateFunction

# Modules whose functions read their arguments and return new values (no RNG state, no
# in-place heap or list edits: not random, heapq, bisect, operator).
PURE_MODULES = frozenset({
    "cmath", "collections", "copy", "datetime", "decimal", "fractions", "functools",
    "itertools", "json", "math", "statistics", "string", "textwrap", "unicodedata",
})
# Builtins that read their arguments and return new values (not next, setattr, exec, print)
PURE_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "bool", "bytes", "callable", "chr", "complex",
    "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash", "hex",
    "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "oct",
    "ord", "pow", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str",
    "sum", "tuple", "type", "zip",
})
IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), range)
MUTABLE = (list, dict, set, bytearray)
TRUSTED_GRACE_S = 0.5  # past a test's limit before its trusted code is stopped
TRUSTED_REPEAT_S = 0.1  # and again this often, for test code that swallowed the first


class TrustedTimeout(BaseException):
    """Trusted code ran past its limit (a BaseException: the test code's ``except
    Exception`` must not take it for a failed assertion of its own)."""


_armed = False


def _expire(signum, frame):
    if _armed:
        raise TrustedTimeout


@contextmanager
def trusted_clock(seconds):
    """Run the body under a wall-clock limit: ``TrustedTimeout`` at ``seconds``, then every
    ``TRUSTED_REPEAT_S`` until the body ends."""
    global _armed
    previous = signal.signal(signal.SIGALRM, _expire)
    _armed = True
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3), TRUSTED_REPEAT_S)
    try:
        yield
    finally:
        _armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _kind(value):
    """What a name the test reads holds: "safe" (the solution's function, a pure builtin or
    module function, immutable data), "data" (a mutable container: read only), or None."""
    if isinstance(value, CandidateFunction) or type(value) in IMMUTABLE:
        return "safe"
    if type(value) in (tuple, frozenset):
        return "safe" if all(_kind(v) == "safe" for v in value) else None
    if type(value) in MUTABLE:
        return "data"
    if isinstance(value, types.ModuleType):
        return "module" if value.__name__ in PURE_MODULES else None
    if isinstance(value, (types.BuiltinFunctionType, type)) and getattr(
            builtins, getattr(value, "__name__", ""), None) is value:
        return "safe" if value.__name__ in PURE_BUILTINS or (
            isinstance(value, type) and issubclass(value, BaseException)) else None
    module = getattr(value, "__module__", None)
    if callable(value) and module in PURE_MODULES:
        return "safe"  # a pure module's function the solution imported (``from math ...``)
    return None


def _local_names(node):
    """Names an assert binds for itself: comprehension targets and lambda arguments."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.comprehension):
            names |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
        elif isinstance(n, ast.Lambda):
            names |= {a.arg for a in ast.walk(n.args) if isinstance(a, ast.arg)}
    return names


def inert(step, namespace):
    """Whether running the test ``step`` leaves the trusted namespace as it found it (see
    the module docstring); a call-based test always does."""
    if not isinstance(step, ast.Assert):
        return not isinstance(step, ast.AST) and step != "check"
    local = _local_names(step)

    def kind(name):
        if name in local:
            return "safe"
        if name in namespace:
            return _kind(namespace[name])
        return _kind(getattr(builtins, name)) if hasattr(builtins, name) else None

    for node in ast.walk(step):
        if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(node, ast.Name) and kind(node.id) is None:
            return False
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name):
                if kind(node.value.id) not in ("module", "safe") or isinstance(
                        namespace.get(node.value.id), CandidateFunction):
                    return False
            elif _reaches_data(node.value, namespace, kind):
                return False  # a method of the test's own data (``data[0].append``)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and kind(node.func.id) == "data":
            return False
    return True


def _reaches_data(node, namespace, kind):
    """Whether ``node``'s value may be (part of) a mutable container of the namespace; not
    through a call of the solution's, whose result is a fresh copy."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and isinstance(
            namespace.get(node.func.id), CandidateFunction):
        return False
    if isinstance(node, ast.Name):
        return kind(node.id) == "data"
    return any(_reaches_data(child, namespace, kind) for child in ast.iter_child_nodes(node))


def resumable(steps, namespace, is_test):
    """Whether a later turn can take over between any two of ``steps`` (the ones left once
    the solution loaded): all are inert tests, and there are two or more."""
    return len(steps) > 1 and all(is_test(s) and inert(s, namespace) for s in steps)


def may_go_on(job, ran, ask):
    """Between two tests of a resumable job past its turn: True to run on in this process
    (no other item waits, or the host did not say), False to end the turn here. The next
    turn starts ``yield_after_s`` from now."""
    if ask is None or ran == 0 or job.get("yield_at") is None:
        return True
    now = time.monotonic()
    if now < job["yield_at"] or now >= job["deadline"]:
        return True
    if not ask():
        return False
    job["yield_at"] = time.monotonic() + job["yield_after_s"]
    if "turn_end" in job:  # another turn: a test started before the next ask ends in it
        job["turn_end"] = max(job["turn_end"], job["yield_at"] + job["time_limit_s"])
    return True
