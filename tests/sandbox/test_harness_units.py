"""The harness's pure parts, on the host (no container): the wire codec and frames, output
comparison, text escaping, which test setup runs before the candidate, the clean-up of trees a
candidate locked, the statuses table, and the runner's check of a verdict's shape."""

from __future__ import annotations

import ast
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from sandbox.harness import asserts, compare, protocol, slate, statuses, suite, verdicts
from sandbox.runner import Execution, failed, parse_reply


@pytest.mark.parametrize(("value", "expected"), [
    ("ok", "ok"),
    ("\ud800", "\\ud800"),
    ({"a\udfff": ["x\ud800y", 1, None]}, {"a\\udfff": ["x\\ud800y", 1, None]}),
    ("é ✓", "é ✓"),
])
def test_printable_escapes_lone_surrogates_only(value: object, expected: object) -> None:
    assert protocol.printable(value) == expected
    json.dumps(protocol.printable(value), ensure_ascii=False).encode("utf-8")


def test_tail_escapes_invalid_utf8() -> None:
    assert protocol.tail(b"ok \xff\xed\xa0\x80 \xc3\xa9", 100) == "ok \\xff\\xed\\xa0\\x80 é"


@pytest.mark.parametrize(("source", "uses"), [
    ("import math", False),
    ("METADATA = {'x': 1}", False),
    ("def check(candidate):\n    assert candidate(1) == 2", False),
    ("def helper(x=add(1)):\n    pass", True),  # a default runs at definition
    ("@candidate\ndef g():\n    pass", True),
    ("x = add(1, 2)", True),
    ("f = lambda: add(1)", False),
    ("class C:\n    y = add(1)", True),  # a class body runs at definition
    ("values = [candidate(i) for i in range(3)]", True),
])
def test_mentions_finds_setup_that_would_run_the_candidate(source: str, uses: bool) -> None:
    (node,) = ast.parse(source).body
    assert asserts.mentions(node, {"candidate", "add"}) is uses


def test_remove_tree_unlocks_what_a_candidate_locked(tmp_path: Path) -> None:
    locked = tmp_path / "box" / "dir" / "sub"
    locked.mkdir(parents=True)
    (locked / "secret").write_text("x")
    os.symlink("/etc", tmp_path / "box" / "link")  # removed, never followed
    os.chmod(locked, 0)
    os.chmod(locked.parent, 0)
    slate.empty_dir(str(tmp_path / "box"))
    assert os.listdir(tmp_path / "box") == []
    assert os.path.exists("/etc/passwd")


def test_ipc_counts_and_ids_see_a_new_segment() -> None:
    """The kernel's counters (what the clean-slate check reads) and /proc/sysvipc (what the
    clean-up reads) both see a segment; removing it by the listed id brings the count back."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    before = slate.ipc_counts()
    ident = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    assert ident >= 0
    try:
        assert slate.ipc_counts()["shm"] == before["shm"] + 1  # pages
        assert ident in slate.ipc_ids("shm")
    finally:
        assert libc.shmctl(ident, slate.IPC_RMID, None) == 0
    assert slate.ipc_counts() == before


@pytest.mark.parametrize("reply", [
    5, [], {}, {"status": "ok", "tests": 5}, {"status": "maybe"},
    {"status": "ok", "tests": [{"status": "passed", "time_ms": "fast"}]},
    {"status": "ok", "tests": [{"status": "forged"}]},
    {"status": "ok", "tests": ["passed"]},
])
def test_parse_reply_rejects_malformed_verdicts(reply: object) -> None:
    assert parse_reply(reply) is None


def test_parse_reply_escapes_text() -> None:
    result = parse_reply({"status": "ok", "detail": "\ud800", "tests": [
        {"status": "runtime_error", "time_ms": 1, "stderr": "x\udfff"}]})
    assert result is not None
    assert result.detail == "\\ud800" and result.tests[0].stderr == "x\\udfff"


@pytest.mark.parametrize("value", [
    None, True, 0, -(10**40), 1.5, float("inf"), "é\ud800", b"\x00\xff", 1 + 2j,
    [1, (2, 3)], {"a": {1, 2}}, {(1, 2): [None]}, frozenset({1}),
])
def test_codec_round_trips_plain_data(value: object) -> None:
    decoded = protocol.decode(json.loads(json.dumps(protocol.encode(value))))
    assert decoded == value
    assert type(decoded) is (set if type(value) is frozenset else type(value))


@pytest.mark.parametrize("value", [object(), [1, print], type("Int", (int,), {})(3)])
def test_codec_refuses_anything_but_plain_data(value: object) -> None:
    with pytest.raises(TypeError):
        protocol.encode(value)


@pytest.mark.parametrize("node", [[1], {"i": "1", "f": "2"}, {"x": 1}, {"l": [{"q": 1}]}])
def test_decode_refuses_malformed_values(node: object) -> None:
    with pytest.raises(ValueError):
        protocol.decode(node)


def test_frames_travel_a_pipe_and_time_out() -> None:
    r, w = os.pipe()
    try:
        protocol.send_frame(w, {"x": [1, "é"]})
        assert protocol.recv_frame(r) == {"x": [1, "é"]}
        with pytest.raises(TimeoutError):
            protocol.recv_frame(r, deadline=time.monotonic() + 0.05)
        os.write(w, (100).to_bytes(4, "big"))
        with pytest.raises(ValueError):
            protocol.recv_frame(r, max_bytes=10)
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize(("expected", "actual", "tolerance", "match"), [
    ("1\n2\n", "1\n2", None, True),
    ("1 2", "1 2   \n\n\n", None, True),
    ("1\r\n2", "1\n2", None, True),
    ("1 2", "1  2", None, True),  # inside a line, spacing never counts (the tokens of each)
    ("1\n2", "1\n\n2", None, False),
    ("0.3333", "0.33334", 1e-4, True),
    ("0.3333 x", "0.3333 y", 1e-4, False),
    ("1 2", "1 2 3", 1e-4, False),
])
def test_outputs_match_line_by_line(expected: str, actual: str, tolerance: float | None,
                                    match: bool) -> None:
    assert compare.outputs_match(expected, actual, tolerance) is match


@pytest.mark.parametrize(("code", "setup", "tests"), [
    ("import math\nassert f(1) == 2\nassert f(2) == 3", 1, 2),
    ("def check(candidate):\n    assert candidate(1)\nX = 1", 2, 1),
])
def test_split_tests_counts_asserts_or_one_check(code: str, setup: int, tests: int) -> None:
    found_setup, found_tests = suite.split_tests(code)
    assert (len(found_setup), len(found_tests)) == (setup, tests)
    # the host's total is the harness's own count
    assert Execution("python", "", test_code=code).test_count == tests


@pytest.mark.parametrize("code", ["assert (", "x = 1", ""])
def test_unrunnable_test_code_counts_one_test(code: str) -> None:
    """The harness answers bad_tests for these (no test ran); the host still reports one
    test, so an item never divides by zero."""
    assert suite.count_assertion_tests(code) == 1


def test_verdicts_decided_outside_read_as_the_harness_writes_them() -> None:
    outside = failed(3, "runtime_error", "the sandbox container died during the run")
    inside = parse_reply(verdicts.failed_all(3, "runtime_error",
                                             "the sandbox container died during the run"))
    assert outside == inside
    assert [t.status for t in outside.tests] == ["runtime_error"] * 3


def test_statuses_names_match_the_literals() -> None:
    named = {v for k, v in vars(statuses).items() if k.isupper() and isinstance(v, str)}
    assert named == statuses.TEST_STATUSES | statuses.CODE_STATUSES | statuses.EXECUTION_STATUSES
    assert statuses.UNSCORABLE <= statuses.CODE_STATUSES
    assert statuses.REPLACES_CONTAINER | statuses.UNCACHEABLE_TEST <= statuses.TEST_STATUSES


@pytest.mark.parametrize(("output", "expected", "match"), [
    ((1, 2), [1, 2], True),
    ([(1, 2), (3, 4)], [[[1, 2], [3, 4]]], True),
    (5, [5], True),
    (5, 5, True),
    ([], [], True),
    ([], [[]], True),
    ("5", 5, False),
    ([(1, 2)], [[1, 2]], False),  # APPS too: only the wrapper is compared as lists of lists
    (None, [], False),
    (1, "1", False),
    ({1: 2}, {"1": 2}, True),  # JSON's string keys back to integers, as APPS does
    ({1: 2}, [{"1": 2}], True),
    ({"1": 2}, {"1": 2}, False),
    ({"a": 1}, {"a": 1}, True),
])
def test_call_output_matches_as_apps_does(output: object, expected: object, match: bool) -> None:
    assert compare.call_output_matches(output, expected) is match


@pytest.mark.parametrize(("output", "expected", "match"), [
    ((0, 1), [0, 1], True),
    (0, [0, 1], False),  # APPS's rule would take [0, 1] for a wrapper and pass 0
    (5, [5], False),
    ([[1, 2]], [[1, 2]], True),
    ({1: 2}, {"1": 2}, False),
])
def test_call_output_matches_exactly_as_livecodebench_does(output: object, expected: object,
                                                          match: bool) -> None:
    assert compare.call_output_matches(output, expected, exact=True) is match


def test_candidate_names_never_shadow_builtins_or_the_tests_own() -> None:
    """``install``: the tests' own names and the builtins stay; an allowed module's function
    is the trusted process's own copy; anything else is a proxy."""
    from sandbox.harness.candidate import Candidate, CandidateFunction, install, valid_hello

    hello = {"ready": True, "modules": {"m": "math", "os": "os"}, "names": [
        ["len", "solution", "len"], ["check", "solution", "check"], ["helper", "solution", "helper"],
        ["sqrt", "math", "sqrt"], ["fake", "math", "no_such"]]}
    assert valid_hello(hello)
    namespace: dict[str, object] = {"check": "the test's"}
    install(namespace, Candidate(), hello)
    import math

    assert namespace["check"] == "the test's" and "len" not in namespace
    assert namespace["m"] is math and "os" not in namespace
    assert namespace["sqrt"] is math.sqrt
    assert isinstance(namespace["helper"], CandidateFunction)
    assert isinstance(namespace["fake"], CandidateFunction)
    assert not valid_hello({"ready": True})
    assert not valid_hello({"ready": True, "names": [["f", [1], None]], "modules": {}})
    forged = {"ready": True, "modules": {"__builtins__": "math"},
              "names": [["__builtins__", None, None], ["__import__", None, None]]}
    assert valid_hello(forged)
    namespace = {}
    install(namespace, Candidate(), forged)
    assert namespace == {}
    assert not valid_hello({"ready": True, "names": [[1, None, None]], "modules": {}})


def test_a_turn_ends_between_tests_only_while_the_items_budget_lasts() -> None:
    """Past the item's deadline its remaining tests are over budget now: a later turn with
    no budget left would only fail to set up (a checker that cannot compile in 0 s: null)."""
    from sandbox.harness import verdicts

    now = time.monotonic()
    job = {"yield_at": now - 1, "deadline": now + 10, "started": now - 2}
    assert verdicts.turn_over(job, ran=1)
    assert not verdicts.turn_over(job, ran=0)  # at least one test a turn
    assert not verdicts.turn_over({**job, "deadline": now - 0.1}, ran=1)
    assert not verdicts.turn_over({**job, "yield_at": None}, ran=1)


def test_a_later_turns_setup_does_not_run_on_the_items_clock() -> None:
    from sandbox.harness import verdicts

    now = time.monotonic()
    job = {"yield_at": now + 1, "deadline": now + 2, "started": now}
    with verdicts.restarted_clock(job):
        assert job["deadline"] == float("inf")  # the checker's compile gets its own limit
        time.sleep(0.2)
    assert job["deadline"] >= now + 2.2 and job["started"] >= now + 0.2
    # the container was held all the while: the turn ends when it did (a setup that
    # outlasted it ends the turn as soon as it may)
    assert job["yield_at"] == now + 1


@pytest.mark.parametrize(("source", "preamble", "found"), [
    ("pass", True, None),  # the preamble's operator.add / math.gcd is not the solution's
    ("from math import *", False, None),  # nor one its own (a prompt's) star import binds
    ("class Solution:\n    def gcd(self, a, b):\n        return 0", True, "method"),
    ("from math import *\nclass Solution:\n    def gcd(self, a, b):\n        return 0", False,
     "method"),
    ("from math import gcd\nclass Solution:\n    def gcd(self, a, b):\n        return 0", False,
     "method"),  # APPS calls Solution's when there is one: an import does not hide it
    ("def gcd(a, b):\n    return 0", True, "function"),
    ("from math import gcd", True, "math"),  # an import of its own is its choice
])
def test_the_entry_point_is_what_the_solution_bound(source: str, preamble: bool,
                                                    found: str | None) -> None:
    import math
    import sys

    from sandbox.harness import candidate_server

    namespace = {"__name__": "solution"}
    limit = sys.getrecursionlimit()  # the preamble raises it, as APPS's does
    try:
        starred = candidate_server.load(source, namespace, preamble)
    finally:
        sys.setrecursionlimit(limit)
    entry = candidate_server.resolve(namespace, "gcd")
    if found is None:
        assert entry is None and candidate_server.resolve(namespace, "add") is None
    elif found == "method":
        assert getattr(entry, "__self__", None).__class__.__name__ == "Solution"
    elif found == "function":
        assert entry.__module__ == "solution"
    else:
        assert entry is math.gcd
    if "import *" in source:
        assert starred["gcd"] is math.gcd  # the tests may still use it (MBPP's one module)


def test_a_star_imported_name_works_in_the_solution_and_keeps_its_line_numbers() -> None:
    from sandbox.harness import candidate_server

    namespace = {"__name__": "solution"}
    candidate_server.load("from math import *\n\ndef f(x):\n    return sqrt(x) + 1 / 0\n",
                          namespace, False)
    assert namespace["f"].__code__.co_firstlineno == 3 and "sqrt" not in namespace
    with pytest.raises(ZeroDivisionError):
        namespace["f"](4)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_starved_tells_a_held_back_program_from_a_sleeping_or_computing_one() -> None:
    """At a timeout: runnable with under half its limit of CPU is starved; asleep, or with
    its CPU used, is not. Four loops pinned to one CPU hold each other back."""
    import subprocess
    import sys

    from sandbox.harness.processes import starved

    loop = [sys.executable, "-c", "while True: pass"]
    pin = {"preexec_fn": lambda: os.sched_setaffinity(0, {0})}
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    loops = [subprocess.Popen(loop, **pin) for _ in range(4)]  # type: ignore[call-overload]
    alone = subprocess.Popen(loop)
    try:
        started = time.monotonic()
        while _cpu_s(alone.pid) < 0.3:  # it has computed (at whatever pace the load allows)
            time.sleep(0.05)
        # long enough that loops[0]'s head start (alone on its CPU while the other three
        # started, up to a second on a loaded machine) stays under half of it
        time.sleep(max(0.0, 4.0 - (time.monotonic() - started)))
        wall = time.monotonic() - started
        assert not starved(sleeper.pid, wall)
        assert starved(loops[0].pid, wall)  # about a quarter of one CPU in that time
        assert not starved(alone.pid, 0.2)  # it used more than half of a 0.2 s limit
    finally:
        for p in (sleeper, *loops, alone):
            p.kill()
            p.wait()


@pytest.mark.parametrize(("script", "shared"), [
    ("echo \"x.cpp:1:1: error: expected ';'\" >&2; exit 1", True),  # the source's: again
    ("echo 'g++: fatal error: Killed signal terminated program cc1plus' >&2; exit 1", False),
    ("echo 'clang: error: unable to execute command: Killed' >&2; exit 1", False),
    ("kill -9 $$", False),
])
def test_a_compiler_killed_from_outside_is_the_moments_not_the_sources(
        script: str, shared: bool) -> None:
    """A kill (an OOM killer counting what else held the container's memory) says nothing
    of the source: its compile error is momentary, never shared with another item's copy
    of the source or cached, where the compiler's own refusal is."""
    from sandbox.harness import stdio

    job = {"language": {"compile": ["sh", "-c", script], "source": "x.cpp"},
           "compile_time_limit_s": 10, "deadline": time.monotonic() + 30,
           "compile_memory_mb": 0, "output_limit_bytes": 65536, "stderr_tail_bytes": 4096,
           "want_artifacts": True}
    workdir = tempfile.mkdtemp()
    os.chmod(workdir, 0o777)  # as root, the compiler runs as the candidate's uid
    try:
        failure = stdio.compile_program(job, workdir, {"PATH": os.environ["PATH"]})
    finally:
        os.rmdir(workdir)
    assert failure is not None and "cannot start" not in failure["detail"], failure
    assert failure["status"] == statuses.COMPILE_ERROR
    assert (job.get("build") is not None) is shared, job
    assert bool(job.get("momentary")) is not shared, job


def test_a_later_turns_wall_clock_allows_its_checker_compiled_again() -> None:
    """A later turn that must compile its checker again (the host kept no build) does so off
    the item's clock; its wall clock, cut to the budget left, timed the turn out, and every
    test it had left scored 0 for our scheduling."""
    from sandbox.config import SandboxConfig
    from sandbox.runner import Sandbox, TestCase

    sandbox = Sandbox(SandboxConfig())
    ex = Execution("cpp", "int main() {}", tests=(TestCase("1", "1"),),
                   checker=("cpp", "int main() { return 0; }"))
    later_job, _, later = sandbox._job(ex, spent_s=sandbox.config.item_budget_s - 0.5)
    assert later >= sandbox.config.compile_time_limit_s + 0.5  # 0.5 s of budget left
    kept = {**later_job, "checker": {**later_job["checker"], "artifacts": {}}}
    assert sandbox._checker_again_s(kept) == 0.0  # unpacked, not compiled
