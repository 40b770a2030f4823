"""An assertion item holds the container pool one turn, no longer than a test may, and its
reward is the one it gets alone.

One container, a request budget of 10 s. Caller A sends an MBPP item of 30 asserts that
each take half a second; caller B then sends a correct item. An assertion item once ran
in one turn up to its own budget: B waited behind A's 15 s, its
budget ran out and its correct item came back ``not_run`` (null), 3 of 3. Then A's item took
turns, loading its solution afresh in each: a solution right only on its first call passed
each turn's first test, so its reward rose with the number of other items waiting. Now an
assertion item runs in one process, of at most the longest a test may take (3 s here), B is
scored within its budget, and A's verdicts do not depend on B. Order is read from events
(which answer came first), never from the clock. Under runc and gVisor.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from reward_server.testing import A, B, one_container_server, verify_code
from tests.conftest import SandboxRuntime, ServerProcess
from tests.helpers.metrics import counter
from tests.helpers.turns import hold_then_arrive

# what the server does around the sandbox: under gVisor too only where marked isolation
pytestmark = pytest.mark.host_side

BUDGET_S = 10.0  # per request: what B may be shut out for
LONGEST_TEST_S = 3.0  # the server's max_time_limit_s: test code that cannot take turns
SLOW = "```python\nimport time\ndef slow(k):\n    time.sleep(0.5)\n    return k\n```"


@pytest.fixture(scope="module")
def one_container(sandbox_runtime: SandboxRuntime, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[ServerProcess]:
    """One container, under runc or gVisor."""
    env = {"REWARD_SERVER_REQUEST_BUDGET_S": str(BUDGET_S),
           "REWARD_SERVER_SANDBOX_MAX_TIME_LIMIT_S": str(LONGEST_TEST_S), **sandbox_runtime.env}
    with one_container_server(tmp_path_factory.mktemp(f"fair-turns-{sandbox_runtime.name}"),
                              env) as srv:
        yield srv


def test_a_long_assertion_item_runs_one_turn_and_lets_another_caller_in(
        one_container: ServerProcess) -> None:
    asserts = [f"assert slow({k}) + BASE == {k + 100}" for k in range(30)]
    hog = {"response": SLOW, "test_list": asserts, "test_setup_code": "BASE = 100",
           "time_limit_s": 2.0, "budget_s": 120.0}
    a, b, finished = hold_then_arrive(one_container.url, hog)
    # B ran once A's one turn ended: scored, not a null
    assert (b["status"], b["score"]) == ("ok", 1.0), b
    assert finished == [A, B], finished
    statuses = [t["status"] for t in a["tests"]]
    cut = statuses.index("timeout")
    assert 0 < cut < 30 and statuses == ["passed"] * cut + ["timeout"] * (30 - cut), a
    assert "runs in one process" in a["tests"][-1]["stderr"], a["tests"][-1]


# Wrong, but right on its first call, and slow enough that a split turn would come
STATEFUL = ("```python\nimport time\ncalls = 0\ndef f(x):\n    global calls\n"
            "    calls += 1\n    time.sleep(0.4)\n    return x * 2 if calls == 1 else -1\n```")


def test_a_solutions_reward_is_the_same_whoever_else_waits(
        one_container: ServerProcess) -> None:
    """Its tests share the solution's process, as in MBPP's own grader: the second call is
    wrong, alone or while another caller waits. (Taking turns, each turn loaded it afresh,
    and with others waiting it scored more than alone.)"""
    def item(tag: str) -> dict[str, Any]:
        return {"response": STATEFUL.replace("```python\n", f"```python\n# {tag}\n"),
                "test_list": [f"assert f({k}) == {2 * k}" for k in range(1, 5)],
                "time_limit_s": 1.0}

    alone = verify_code(one_container.url, item("alone"))[0]
    a, b, _ = hold_then_arrive(one_container.url, item("busy"))
    assert (b["status"], b["score"]) == ("ok", 1.0), b
    expected = ["passed", "wrong_answer", "wrong_answer", "wrong_answer"]
    assert [t["status"] for t in alone["tests"]] == expected, alone
    assert [t["status"] for t in a["tests"]] == expected, a
    assert alone["score"] == a["score"] == 0.25


@pytest.mark.isolation
def test_a_test_that_loops_in_its_own_code_stops_at_its_time_limit(
        one_container: ServerProcess) -> None:
    """The test's own expression runs in the tester, not in the solution's process: it is
    stopped at the test's limit, as the solution is, not when the item's budget ends. The
    solution stopped with it fails the tests after it."""
    item = {"response": SLOW, "budget_s": 120.0, "time_limit_s": 1.0,
            "test_list": ["assert slow(1) == 1",
                          "assert all(True for _ in iter(int, 1))",  # never ends
                          "assert slow(2) == 2"]}
    a, b, _ = hold_then_arrive(one_container.url, item)
    assert (b["status"], b["score"]) == ("ok", 1.0), b
    assert [t["status"] for t in a["tests"]] == ["passed", "timeout", "runtime_error"], a
    assert "ran past its time limit" in a["tests"][1]["stderr"], a["tests"][1]


# Test code that stops the clock the harness keeps on it, then loops: the tester's own clocks
# are the caller's to stop, so PID 1 keeps the turn too (sandbox/harness/tester.py)
STOPS_ITS_CLOCK = """import signal, time
signal.setitimer(signal.ITIMER_REAL, 0)
signal.signal(signal.SIGALRM, signal.SIG_IGN)
while True:
    try:
        time.sleep(1)
    except BaseException:
        pass
"""


@pytest.mark.isolation
def test_test_code_that_stops_its_own_clock_holds_the_container_one_turn(
        one_container: ServerProcess) -> None:
    """It held the container for its item's whole budget (120 s here), and the caller who
    came next got ``not_run`` when its 10 s ran out; now PID 1 stops it at the end of its
    turn (the longest a test may take, 3 s, and a grace): the other caller is scored within
    its budget, and the item whose own test code never ended is the dataset's null."""
    hog = {"response": SLOW, "test_list": [f"assert slow({k}) == {k}" for k in range(20)],
           "budget_s": 120.0, "time_limit_s": 2.0, "test_setup_code": STOPS_ITS_CLOCK}
    a, b, _ = hold_then_arrive(one_container.url, hog)
    assert (b["status"], b["score"]) == ("ok", 1.0), b
    assert (a["status"], a["score"]) == ("bad_tests", None), a


def slow_cpp(body: str, loops: int = 2) -> str:
    """C++ whose compile takes seconds (constexpr loops the compiler evaluates), then
    ``body``, in which TOTAL is their sum (0 at run time's cost)."""
    src = "#include <cstdio>\n#include <unistd.h>\n"
    src += "".join(
        f"constexpr long f{k}() {{ long s = {k}; for (long i = 0; i < 5; i++) "
        f"for (long j = 0; j < 200000; j++) s += (i ^ j ^ {k}) % 7; return s; }}\n"
        f"constexpr long v{k} = f{k}();\n" for k in range(loops))
    return src + body.replace("TOTAL", "+".join(f"v{k}" for k in range(loops)))


def test_compiles_end_their_turn_so_a_checker_item_cannot_hold_the_pool_past_a_budget(
        one_container: ServerProcess) -> None:
    """A checker that compiles for seconds, a program that does too, then a test and its
    check: one turn of them all held the only container past B's budget (10 s here; 100 s
    with the server's own limits), and B's correct item came back null. A compile now ends
    the turn once it has passed (its build kept: the checker's and the program's are handed
    to the next turn), so B waits for one of them at most, and A's verdict is unchanged."""
    tag = str(time.time())
    checker = slow_cpp("int main() { sleep(2); return (TOTAL) * 0; } // " + tag)
    program = slow_cpp('int main() { long a, b; if (scanf("%ld %ld", &a, &b) != 2) return 1; '
                       'usleep(2500000); printf("%ld\\n", a + b + (TOTAL) * 0); } // ' + tag)
    hog = {"language": "cpp", "response": f"```cpp\n{program}\n```",
           "tests": [{"input": "2 3", "output": "5"}], "time_limit_s": 3.0, "budget_s": 120.0,
           "checker": {"language": "cpp", "source": checker}}
    turns = counter(one_container.url, "reward_turns_yielded_total")
    a, b, _ = hold_then_arrive(one_container.url, hog)
    assert (b["status"], b["score"]) == ("ok", 1.0), b
    assert (a["status"], a["score"]) == ("ok", 1.0), a
    assert counter(one_container.url, "reward_turns_yielded_total") > turns


# A stdin program that marks every place it may write (its work dir, HOME, /dev/shm), tries
# to change and to move its own source, and answers "fresh" only where no mark was left:
# each test runs alone in a judge, whichever turn or container runs it
MARKS = ("```python\nimport os, time\n"
         "marks = ['mark', os.path.join(os.environ['HOME'], 'home_mark'), '/dev/shm/mark']\n"
         "seen = any(os.path.exists(m) for m in marks) or os.path.exists('moved.py')\n"
         "for m in marks:\n    try:\n        open(m, 'w').write('x')\n"
         "    except OSError:\n        pass\n"
         "for act in (lambda: open('main.py', 'a').write('\\nprint(1)\\n'),\n"
         "            lambda: os.rename('main.py', 'moved.py'),\n"
         "            lambda: os.link('main.py', 'linked.py')):\n"
         "    try:\n        act()\n    except OSError:\n        pass\n"
         "time.sleep(0.4)\n"
         "print('seen' if seen else 'fresh', input())\n```")


def test_a_stdin_programs_tests_each_start_from_its_build(one_container: ServerProcess) -> None:
    """A file one test leaves is not there for the next: the work dir was shared within a
    turn only, and turns end on the wall clock, so such a program scored 0.25 alone and more
    with others waiting (the audit: 0.333 against 0.75). Now every test starts from the
    program's build, which no test can change: 1.0 alone and busy."""
    def item(tag: str) -> dict[str, Any]:
        return {"response": MARKS.replace("```python\n", f"```python\n# {tag}\n"),
                "tests": [{"input": str(k), "output": f"fresh {k}"} for k in range(4)]}

    alone = verify_code(one_container.url, item("alone"))[0]
    a, b, _ = hold_then_arrive(one_container.url, item("busy"))
    assert (b["status"], b["score"]) == ("ok", 1.0), b
    assert (alone["status"], alone["score"]) == ("ok", 1.0), alone
    assert (a["status"], a["score"]) == ("ok", 1.0), a


# A program whose own processes hold it back: it stays runnable, yet gets about a quarter of
# the container's CPU, as a program does on a machine another caller loads
HELD_BACK = ("```python\nimport os\nfor _ in range(3):\n    if os.fork() == 0:\n"
             "        while True:\n            pass\nwhile True:\n    pass\n```")


def test_a_timeout_the_load_may_have_made_is_never_remembered(
        one_container: ServerProcess) -> None:
    """A test that ran out of wall-clock time while its program wanted the CPU, having had
    less than half its limit of it, is a 0 for that run, but no verdict to remember: a right
    program a neighbour's load held back twice was answered "timeout" from memory for ten
    minutes (an audit). Each copy runs again.

    Under gVisor the program's CPU time, as the sandbox's kernel counts it, goes on while the
    sandbox is throttled (four loops on one CPU's quota each count ~0.9 s in 1.5 s, against
    0.38 s under runc), so a held-back test is mostly not told apart there: a second timeout
    of the same item is then believed, and the third copy answered from memory; on a loaded
    machine even gVisor's count can show the program held back, and the third runs again."""
    item = {"response": HELD_BACK, "tests": [{"input": "", "output": "x"}], "time_limit_s": 1}
    remembered = []
    for _ in range(3):
        (result,) = verify_code(one_container.url, item)
        assert (result["status"], result["score"]) == ("ok", 0.0), result
        assert result["tests"][0]["status"] == "timeout", result
        remembered.append("remembered" in (result.get("detail") or ""))
    assert remembered[:2] == [False, False], remembered
    if one_container.runtime == "runc":
        assert not remembered[2], remembered
