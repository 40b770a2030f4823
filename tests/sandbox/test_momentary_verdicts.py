"""What a wall clock decided is never cached for other callers (README, docs/security.md): a
compile that ran past its limit (the item's budget here; a loaded machine's compile just as
well) came back ``compile_error`` (0) and went into the result cache shared by every caller,
and so did a checker that ran past its limit (``bad_tests``, null). Now such a verdict is
``momentary``: the harness says so, the server does not cache it (a repeat runs again, and is
remembered per caller at most, as a timeout), and the build cache (sandbox/builds.py) does not
hand the timed-out compile to the next item of the same source, which compiles and passes.
Through the real server, with the result cache on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import ServerProcess, run_server, verify_code, wait_for_sandbox

pytestmark = pytest.mark.usefixtures("docker_ready")


def slow_to_compile(functions: int, tag: str) -> str:
    """A correct C++ a+b whose compile evaluates ``functions`` constexpr loops (seconds)."""
    src = "#include <cstdio>\n" + "".join(
        f"constexpr long f{k}() {{ long s = {k}; for (long i = 0; i < 5; i++) "
        f"for (long j = 0; j < 200000; j++) s += (i ^ j ^ {k}) % 7; return s; }}\n"
        f"constexpr long v{k} = f{k}();\n" for k in range(functions))
    total = "+".join(f"v{k}" for k in range(functions))
    return src + ('int main() { long a, b; if (scanf("%ld %ld", &a, &b) != 2) return 1; '
                  f'printf("%ld\\n", a + b + ({total}) * 0); }}\n// {tag}\n')


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("momentary"),
                    env={"REWARD_SERVER_SANDBOX_POOL_SIZE": "2"}) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        yield server


def cache_hits(srv: ServerProcess) -> float:
    text = httpx.get(srv.url + "/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if re.match(r'^reward_cache_hits_total\{.*verifier="code"', line))


def test_a_timed_out_compile_or_check_is_not_cached(srv: ServerProcess) -> None:
    tag = str(time.time_ns())
    source = slow_to_compile(3, tag)
    cut_short: dict[str, Any] = {  # its budget ends the compile
        "language": "cpp", "response": f"```cpp\n{source}```",
        "tests": [{"input": "2 3", "output": "5"}],
        "budget_s": 0.5}
    hanging = {"response": f"print(int(input()) + 1)  # {tag}",
               "tests": [{"input": "1", "output": "2"}],
               "checker": {"language": "python", "source": "while True:\n    pass"}}
    hits = cache_hits(srv)
    for _ in range(2):
        compiled, checked = verify_code(srv.url, cut_short, hanging)
        assert (compiled["status"], compiled["score"]) == ("compile_error", 0.0), compiled
        assert "ran past its time limit" in compiled["detail"], compiled
        assert (checked["status"], checked["score"]) == ("bad_tests", None), checked
        assert "ran past" in checked["detail"], checked
    assert cache_hits(srv) == hits  # each ran twice: nothing came from the cache

    # the same source with time to compile: built, not the build cache's compile error
    (passed,) = verify_code(srv.url, {**cut_short, "budget_s": None,
                                      "tests": [{"input": "20 22", "output": "42"}]})
    assert (passed["status"], passed["score"]) == ("ok", 1.0), passed


# A checker that accepts the answer as the jury wrote it at once, and on any other output
# (the candidate's right answer with a trailing space) either sleeps past its limit, as a
# check starved by a loaded machine does (no CPU used), or computes past it.
STARVED_ON_OTHERS = ("import sys, time\n"
                     "out, ans = (open(p).read().strip() for p in sys.argv[2:4])\n"
                     "if open(sys.argv[2]).read() != open(sys.argv[3]).read():\n"
                     "    time.sleep(60)\n"
                     "sys.exit(0 if out == ans else 1)\n")
COMPUTES_ON_OTHERS = STARVED_ON_OTHERS.replace("time.sleep(60)", "while True: pass")


def test_a_starved_check_of_a_right_answer_is_no_zero(srv: ServerProcess) -> None:
    """A check that ran past its limit having used little CPU, of an output whose reference
    answer the checker accepts, was the machine's load: a right answer came back
    wrong_answer (0), the reference check taken as proof that the output made the checker
    fail. Now it is bad_tests (null), momentary; a check that computed for its limit on an
    output (far more CPU than the reference costs) is still the output's doing: 0."""
    tag = str(time.time_ns())
    item = {"response": f"print(int(input()) + 1, end=' \\n')  # {tag}",
            "tests": [{"input": "1", "output": "2"}]}
    starved, computed = verify_code(
        srv.url, {**item, "checker": {"language": "python", "source": STARVED_ON_OTHERS}},
        {**item, "checker": {"language": "python", "source": COMPUTES_ON_OTHERS}})
    assert (starved["status"], starved["score"]) == ("bad_tests", None), starved
    assert "the machine's load" in starved["detail"], starved
    assert (computed["status"], computed["score"]) == ("ok", 0.0), computed
    assert computed["tests"][0]["status"] == "wrong_answer", computed


# Run as the candidate's uid in each sandbox container (root there holds no capability):
# SIGKILL every cc1plus, as an OOM killer does, and say how many.
KILL_CC1PLUS = ("import os, signal\n"
                "n = 0\n"
                "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
                "    if int(pid) == os.getpid():\n"
                "        continue  # its own command line names cc1plus\n"
                "    try:\n"
                "        if b'cc1plus' in open(f'/proc/{pid}/cmdline', 'rb').read():\n"
                "            os.kill(int(pid), signal.SIGKILL); n += 1\n"
                "    except OSError:\n"
                "        pass\n"
                "print(n)\n")


def test_a_compiler_killed_from_outside_is_not_the_sources_compile_error(
        srv: ServerProcess) -> None:
    """cc1plus killed (an OOM killer counting what else held the container's memory;
    gVisor's counts no OOM kill at all): g++ says 'Killed signal terminated program' and
    exits 1, which read as the source's compile error, handed to every later copy of the
    source by the build cache and cached for every caller. Now it is momentary: the same
    item sent again compiles and passes."""
    import docker

    from sandbox.pool import LABEL

    client = docker.from_env(timeout=60)
    for _ in range(3):  # the compile may end (or meet the container's own limit) before a kill
        tag = str(time.time_ns())
        item = {"language": "cpp", "response": f"```cpp\n{slow_to_compile(12, tag)}```",
                "tests": [{"input": "20 22", "output": "42"}]}
        pool = ThreadPoolExecutor(1)
        first = pool.submit(verify_code, srv.url, item)
        killed, deadline = 0, time.monotonic() + 120
        while not killed and not first.done() and time.monotonic() < deadline:
            for container in client.containers.list(filters={"label": LABEL}):
                out = container.exec_run(["python3", "-c", KILL_CC1PLUS], user="10001")
                killed += int(out.output.decode().strip() or 0) if out.exit_code == 0 else 0
            time.sleep(0.1)
        (result,) = first.result(timeout=300)
        pool.shutdown()
        if killed:
            break
    assert killed, f"the compile ended before it could be killed, 3 times: {result}"
    assert (result["status"], result["score"]) == ("compile_error", 0.0), result
    assert "Killed signal terminated program" in result["detail"], result
    (again,) = verify_code(srv.url, item)
    assert (again["status"], again["score"]) == ("ok", 1.0), again
