"""What the harness (the container's PID 1, trusted) does with the candidate's reply is
bounded: a reply too large to decode, or one whose values collide in hash, is the candidate's
failure (a failed test, score 0), answered at once; the container lives on. Through the real
server and sandbox, under runc and under gVisor; each case prints how long the item held its
container (``pytest -s``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SandboxRuntime, ServerProcess
from tests.helpers.code import code_server, verify_one

pytestmark = pytest.mark.usefixtures("docker_ready")

# Long enough that, unbounded, the harness's own work finishes inside the item's budget and
# the hold time is the harness's (26 s for 100,000 colliding ints), not the runner's timeout.
TIME_LIMIT_S = 30
# The refusal itself is asserted by the statuses (runtime_error: refused; decoded and
# compared, a wrong value is a wrong_answer). The hold bound only tells an answer at once from
# the harness doing the unbounded work (26 s for the colliding ints): not a speed goal, so it
# sits well above what a loaded runner adds to the candidate's own work.
HOLD_LIMIT_S = 20.0

# Ints that are equal modulo 2**61 - 1 have one hash: a set of n of them costs n**2 / 2 probes
# to build wherever it is built.
COLLIDE = "P = (1 << 61) - 1\n"
# The reply frame written by the solution itself onto the candidate server's reply pipe (fd 4),
# so the candidate never builds the costly value it sends.
FORGE = (
    "import os, struct\n"
    "def forge(body):\n"
    "    os.write(4, struct.pack('>I', len(body)) + body)\n"
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory,
        sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
    env = {**sandbox_runtime.env, "REWARD_SERVER_SANDBOX_POOL_SIZE": "2",
           "REWARD_SERVER_CACHE_SIZE": "0"}
    with code_server(tmp_path_factory.mktemp(f"bounds-{sandbox_runtime.name}"),
                     env=env) as server:
        yield server


def run(srv: ServerProcess, case: str, **item: Any) -> tuple[dict[str, Any], float]:
    """The item's result and how long it held its container; the container did not die."""
    log_before = srv.log.read_text()
    started = time.monotonic()
    result = verify_one(srv, time_limit_s=TIME_LIMIT_S, **item)
    held = time.monotonic() - started
    print(f"\n{srv.runtime} {case}: held {held:.1f} s, {result['status']}, "
          f"{[t['status'] for t in result['tests']]}")
    died = srv.log.read_text()[len(log_before):]
    assert "died" not in died, died[-2000:]
    assert all("container died" not in t["stderr"] for t in result["tests"]), result
    return result, held


def fenced(source: str) -> str:
    return f"```python\n{source}\n```"


def test_a_forged_set_of_colliding_ints_fails_at_once(srv: ServerProcess) -> None:
    solution = COLLIDE + FORGE + (
        "import json\n"
        "def f(n):\n"
        "    forge(json.dumps({'value': {'s': [{'i': str(i * P)} for i in range(1, n + 1)]}})"
        ".encode())\n"
        "    return 0\n")
    result, held = run(srv, "forged colliding set", response=fenced(solution), fn_name="f",
                       tests=[{"input": "[100000]", "output": [1]}])
    assert result["score"] == 0.0 and result["status"] == "ok", result
    assert result["tests"][0]["status"] == "runtime_error", result
    assert held < HOLD_LIMIT_S


def test_a_list_of_colliding_ints_cannot_stall_the_tests_set(srv: ServerProcess) -> None:
    """The solution returns a plain list; the dataset's own test puts it in a set (MBPP's
    ``assert set(f(x)) == ...``), in the trusted process."""
    solution = COLLIDE + "def f(n):\n    return [i * P for i in range(1, n + 1)]\n"
    result, held = run(srv, "colliding list, set() in the test", response=fenced(solution),
                       entry_point="f", test_code="assert set(f(100000)) == {1}\n")
    assert result["score"] == 0.0 and result["tests"][0]["status"] == "runtime_error", result
    assert held < HOLD_LIMIT_S


def test_a_forged_60_mb_reply_fails_and_the_container_lives(srv: ServerProcess) -> None:
    solution = FORGE + (
        "def f(n):\n"
        "    forge(b'{\"value\":{\"l\":[' + b'{\"i\":\"1\"},' * (n - 1) + b'{\"i\":\"1\"}]}}')\n"
        "    return 0\n")
    result, held = run(srv, "forged 60 MB reply", response=fenced(solution), fn_name="f",
                       tests=[{"input": "[6000000]", "output": [1]}])
    assert result["score"] == 0.0 and result["tests"][0]["status"] == "runtime_error", result
    assert held < HOLD_LIMIT_S


def test_a_returned_60_mb_value_fails(srv: ServerProcess) -> None:
    """A string: it costs the candidate little to encode (a list of 60 MB would not encode
    within its memory), and the harness as much to read."""
    solution = "def f(n):\n    return 'x' * n\n"
    result, held = run(srv, "returned 60 MB value", response=fenced(solution), fn_name="f",
                       memory_mb=700, tests=[{"input": "[60000000]", "output": '"x"'}])
    assert result["score"] == 0.0 and result["tests"][0]["status"] == "runtime_error", result
    assert held < HOLD_LIMIT_S


@pytest.mark.parametrize("form", ["call", "stdio"])
def test_printing_60_mb_fails(srv: ServerProcess, form: str) -> None:
    printer = "print('x' * 60_000_000)"
    item = ({"response": fenced(f"def f():\n    {printer}\n    return 1\n"), "fn_name": "f",
             "tests": [{"input": "[]", "output": 1}]} if form == "call" else
            {"response": fenced(printer), "tests": [{"input": "", "output": "x"}]})
    result, held = run(srv, f"prints 60 MB ({form})", **item)
    assert result["score"] == 0.0, result
    assert held < HOLD_LIMIT_S


@pytest.mark.parametrize(("returned", "n"), [
    ("list(range(n))", 200_000),
    ("set(range(n))", 200_000),
    ("{i: -i for i in range(n)}", 200_000),
    # the candidate's encoder needs ~1 KB a tuple: its 256 MB hold ~50,000
    ("[(i, -1, -2) for i in range(n)]", 30_000),
    ("[0] * n", 200_000),
])
def test_large_plain_values_still_pass(srv: ServerProcess, returned: str, n: int) -> None:
    """The bounds leave room for large honest values (-1 and -2 share a hash too)."""
    expected = returned.replace("(n)", f"({n})").replace("* n", f"* {n}")
    result, _ = run(srv, f"returns {returned}", response=fenced(f"def f(n):\n    return {returned}\n"),
                    entry_point="f", test_code=f"assert f({n}) == {expected}\n")
    assert result["score"] == 1.0, result["tests"]
