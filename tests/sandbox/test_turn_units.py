"""Where an assertion job may end its turn (``harness/turns.py``): only between tests that
leave the trusted namespace as they found it, so a later turn that rebuilds it from the
setup is exact; and the clock that stops the test code's own loops."""

from __future__ import annotations

import ast
import collections
import heapq
import math
import random
import time

import pytest

from sandbox.harness import turns
from sandbox.harness.asserts import Call, is_test
from sandbox.harness.candidate import Candidate


def namespace() -> dict:
    candidate = Candidate()
    return {"f": candidate.function("f"), "g": candidate.function("g"), "BASE": 100,
            "PAIR": (1, "a"), "data": [3, 1, 2], "table": {"a": 1}, "math": math,
            "random": random, "heapq": heapq, "collections": collections,
            "gcd": math.gcd, "push": heapq.heappush, "it": iter([1, 2]),
            "helper": lambda x: x, "Node": type("Node", (), {})}


@pytest.mark.parametrize(("source", "inert"), [
    # MBPP's and HumanEval-style asserts: the solution's functions on values
    ("assert f(1) == 2", True),
    ("assert f('abc', [1, 2]) == {'a': (1,)}", True),
    ("assert set(f((3, 4, 5))) == set((4, 5))", True),
    ("assert math.isclose(f(2), 1.5, rel_tol=1e-3)", True),
    ("assert f(BASE) + PAIR[0] == 101", True),
    ("assert f(data) == sorted(data)", True),  # sent by value; sorted copies
    ("assert all(f(x) == x for x in range(3))", True),
    ("assert gcd(f(4), 6) == 2", True),
    ("assert f(table['a']).count(1) == 1", True),
    ("assert collections.Counter(f(1)) == {}", True),
    ("assert f('x').upper() == 'X'", True),
    # what could change what a later test sees
    ("assert (n := f(1)) == 1", False),
    ("assert data.pop() == 2", False),
    ("assert f(data)[0].bit_length() == 2", True),  # the solution's copy
    # (conservative: an element of the test's own data may be a mutable one)
    ("assert data[0].bit_length() == 2", False),
    ("assert table.setdefault('b', 2)", False),
    ("assert next(it) == 1", False),
    ("assert random.random() < 1", False),
    ("assert push(data, 1) is None", False),
    ("assert heapq.heappop(data) == 1", False),
    ("assert helper(f(1))", False),
    ("assert f(Node())", False),
    ("assert print(f(1)) is None", False),
    ("assert f.candidate is not None", False),
    ("assert undefined_name(1)", False),
])
def test_only_asserts_that_leave_the_namespace_alone_are_inert(source: str, inert: bool) -> None:
    (node,) = ast.parse(source).body
    assert turns.inert(node, namespace()) is inert


def test_a_job_resumes_only_where_every_step_left_is_an_inert_test() -> None:
    ns = namespace()
    a, b = ast.parse("assert f(1) == 1\nassert f(2) == 2").body
    statement = ast.parse("x = f(1)").body[0]
    assert turns.resumable([a, b], ns, is_test)
    assert turns.resumable([Call([1], 1), Call([2], 2)], ns, is_test)  # call-based
    assert not turns.resumable([a], ns, is_test)  # one test: nothing to take turns between
    assert not turns.resumable([a, statement, b], ns, is_test)
    assert not turns.resumable(["check"], ns, is_test)


def test_the_trusted_clock_stops_a_loop_even_one_that_swallows_the_first_stop() -> None:
    started = time.process_time()
    stops = 0
    with pytest.raises(turns.TrustedTimeout), turns.trusted_clock(0.2):
        while True:
            try:
                while True:
                    pass
            except turns.TrustedTimeout:
                stops += 1
                if stops == 3:
                    raise
    assert stops == 3 and time.process_time() - started < 5
    time.sleep(0.3)  # disarmed: nothing more is raised


def test_may_go_on_asks_only_past_the_turn_and_between_tests() -> None:
    now = time.monotonic()
    asked: list[bool] = []

    def ask() -> bool:
        asked.append(True)
        return False

    job = {"yield_at": now + 60, "yield_after_s": 1.0, "deadline": now + 120}
    assert turns.may_go_on(job, 3, ask) and not asked  # its turn is not over
    job["yield_at"] = now - 1
    assert turns.may_go_on(job, 0, ask) and not asked  # no test ran in this turn yet
    assert not turns.may_go_on(job, 1, ask) and asked  # others wait: end the turn
    job["deadline"] = now - 0.5
    assert turns.may_go_on(job, 1, ask)  # its budget is spent: the rest are over budget
