"""An assertion job (HumanEval, MBPP, call-based APPS/TACO): the dataset's test code runs in
this trusted process (the job's tester: ``tester``); the candidate's module runs in its own
process (``candidate``), and the names the test code takes from it are proxies.

Order: ``test_setup`` (trusted code from the dataset) runs first, then the statements of
``test_code`` that do not reach the candidate; a failure there is the dataset's (``bad_tests``,
a null reward). Then the candidate loads, and from there on every failure is a failed test:
a wrong program must not buy itself a null.
"""

from __future__ import annotations

import ast
import builtins
import math
import os
import time

from .candidate import (
    Candidate,
    CandidateCrashed,
    CandidateNotLoaded,
    CandidateTimeout,
    install,
    shown,
    valid_hello,
)
from .compare import call_output_matches, int_keys
from .objects import SETUP_MODULE, setup_classes
from .processes import kill_group, oom_kills
from .protocol import recv_frame
from .statuses import (
    BAD_TESTS,
    MEMORY_LIMIT,
    OK,
    PASSED,
    RUNTIME_ERROR,
    SYNTAX_ERROR,
    TIMEOUT,
    WRONG_ANSWER,
)
from .suite import CHECK, split_tests
from .turns import TRUSTED_GRACE_S, TrustedTimeout, trusted_clock
from .verdicts import every_test, failed_all, over_budget, skipped, time_left


class BadTests(Exception):
    """The dataset's tests cannot run, before any program of the candidate's did."""


class Call:
    """One call-based test (APPS, TACO, PrimeIntellect, LiveCodeBench functional): the entry
    point called with ``args``, its return value compared with ``expected`` as those
    datasets' harnesses compare (``compare.call_output_matches``)."""

    def __init__(self, args, expected, exact=False):
        self.args, self.expected, self.exact = args, expected, exact


def call_arguments(args):
    """A lone dict argument gets back the integer keys JSON turned into strings, as APPS's
    harness does."""
    return [int_keys(args[0])] if len(args) == 1 else args


def is_test(step):
    return step == CHECK or isinstance(step, (ast.Assert, Call))


def mentions(node, names):
    """Whether running the statement ``node`` may use one of ``names``. A function's body does
    not run when it is defined: only its decorators, defaults and annotations count."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and n.id in names:
            return True
        body = ([n.body] if isinstance(n, ast.Lambda) else n.body) if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else []
        stack.extend(c for c in ast.iter_child_nodes(n) if not any(c is b for b in body))
    return False


def parse(job):
    """The trusted setup (statements) and the job's steps in order: statements of the test
    code, and tests (an ``assert``, ``CHECK`` or a ``Call``). Raises BadTests."""
    try:
        setup = ast.parse(job.get("test_setup") or "", "test_setup").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise BadTests(f"test_setup does not parse: {exc}") from None
    if job.get("calls") is not None:
        if not job.get("entry_point") or not all(
                isinstance(c, dict) and isinstance(c.get("args"), list) for c in job["calls"]):
            raise BadTests("call tests need an entry point and a list of arguments each")
        exact = job.get("call_compare") == "exact"
        return setup, [Call(call_arguments(c["args"]), c.get("expected"), exact)
                       for c in job["calls"]]
    try:
        code_setup, tests = split_tests(job["test_code"])
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise BadTests(f"test_code does not parse: {exc}") from None
    if not tests:
        raise BadTests("test_code has no assert and no check()")
    if tests == [CHECK]:
        if not job.get("entry_point"):
            raise BadTests("check(candidate) needs an entry_point")
        return setup, [*code_setup, CHECK]
    return setup, job_statements(code_setup, tests)


def run_setup(setup, namespace):
    """Run ``test_setup`` whole; return the classes it defined. Raises BadTests."""
    for node in setup:
        try:
            exec(as_module(node, "test_setup"), namespace)
        except CandidateNotLoaded:
            raise BadTests("test_setup calls the solution; it runs before it loads") from None
        except TrustedTimeout:
            raise BadTests("test_setup ran past the time limit") from None
        except Exception as exc:  # noqa: BLE001 - the dataset's setup is broken
            raise BadTests(f"test_setup failed: {type(exc).__name__}: {exc}") from None
    return setup_classes(namespace)


def run_before_candidate(steps, namespace, names):
    """Run the leading statements of the test code that do not reach the candidate; return
    the steps left. Raises BadTests."""
    steps = list(steps)
    while steps and not is_test(steps[0]) and not mentions(steps[0], names):
        try:
            exec(as_module(steps[0]), namespace)
        except (CandidateNotLoaded, NameError):
            break  # it needs the candidate's names: run it once the candidate is up
        except TrustedTimeout:
            raise BadTests("the test code ran past the time limit before the solution "
                           "loaded") from None
        except Exception as exc:  # noqa: BLE001 - the dataset's test code is broken
            raise BadTests(f"test setup failed: {type(exc).__name__}: {exc}") from None
        steps.pop(0)
    return steps


def test_call(step, namespace, candidate, entry):
    """What running the test ``step`` means."""
    if step == CHECK:
        return lambda: namespace["check"](candidate.function(entry))
    if isinstance(step, Call):
        function = candidate.function(entry, plain=True)

        def call():
            output = function(*step.args)
            if not call_output_matches(output, step.expected, step.exact):
                raise AssertionError(f"returned {short(output)}, expected "
                                     f"{short(step.expected)}")
        return call
    module = as_module(step)
    return lambda: exec(module, namespace)


def short(value, limit=200):
    try:
        text = repr(value)
    except ValueError:  # an int past Python's int-string limit (4,300 digits)
        return f"a {type(value).__name__} too long to print"
    return text if len(text) <= limit else text[:limit] + "..."


def run_asserts(job, workdir, env, zygote=None):
    """Run the job's tests, in one turn (``turns``)."""
    entry = job.get("entry_point")
    candidate = Candidate()
    namespace = {"__name__": SETUP_MODULE, "__builtins__": builtins}
    if job.get("unsplit_s"):  # setup, load and tests: one turn, whatever else waits
        job["turn_end"] = job["started"] + job["unsplit_s"]
    try:
        setup, steps = parse(job)
        count = sum(map(is_test, steps))
        with trusted_clock(time_left(job)):  # a loop in the setup held the container
            if entry:  # after test_setup too: a prompt's stub never stands for the solution
                namespace["candidate"] = namespace[entry] = candidate.function(entry)
            candidate.classes = run_setup(setup, namespace)
            steps = run_before_candidate(steps, namespace, {"candidate", entry})
        if entry:
            namespace["candidate"] = namespace[entry] = candidate.function(entry)
    except BadTests as exc:
        return {"status": BAD_TESTS, "detail": str(exc)}

    stderr_fd = os.memfd_create("stderr")

    def stderr_tail():
        size = os.fstat(stderr_fd).st_size
        data = os.pread(stderr_fd, job["stderr_tail_bytes"],
                        max(0, size - job["stderr_tail_bytes"]))
        return data.decode("utf-8", "backslashreplace")

    try:
        hello = load(candidate, job, workdir, env, stderr_fd, zygote)
        if hello is None:
            return failed_all(count, TIMEOUT, "the solution did not finish loading in time")
        if not valid_hello(hello):
            return failed_all(count, RUNTIME_ERROR, "the solution's process broke the protocol")
        if "load_error" in hello:
            detail = hello["load_error"] + "\n" + stderr_tail()
            status = SYNTAX_ERROR if hello["load_error"].startswith("SyntaxError") else OK
            return {"status": status, "detail": detail.strip()[-job["stderr_tail_bytes"]:],
                    "tests": every_test(count, RUNTIME_ERROR,
                                        detail[-job["stderr_tail_bytes"]:])}
        install(namespace, candidate, hello)
        results = []
        for step in steps:
            if time_left(job) <= 0:
                return {"status": OK, "tests": results + out_of_time(job, count - len(results))}
            if is_test(step):
                results.append(run_one(test_call(step, namespace, candidate, entry), candidate,
                                       job, stderr_tail))
                if results[-1]["status"] != PASSED and job.get("stop_on_failure"):
                    return {"status": OK, "tests": results + skipped(count - len(results))}
                continue
            candidate.deadline = time.monotonic() + time_left(job)
            try:
                with trusted_clock(time_left(job) + TRUSTED_GRACE_S):
                    exec(as_module(step), namespace)
            except (Exception, CandidateCrashed, CandidateTimeout,  # noqa: BLE001
                    TrustedTimeout) as exc:
                message = f"the test code failed after the solution loaded: {shown(exc)}"
                return {"status": OK, "tests": results + every_test(
                    count - len(results), RUNTIME_ERROR, message[-2000:])}
        return {"status": OK, "tests": results}
    finally:
        candidate.close()
        os.close(stderr_fd)
        if candidate.process is not None:
            kill_group(candidate.process)
            candidate.process.wait()


def load(candidate, job, workdir, env, stderr_fd, zygote):
    """Start the solution's process; its first frame, or None if it did not come in time."""
    candidate.start(job, workdir, env, stderr_fd, zygote)
    try:
        return recv_frame(candidate.from_child, time.monotonic() + time_left(job))
    except TimeoutError:
        return None
    except Exception:  # noqa: BLE001 - EOF, or a frame that is not JSON
        return {"load_error": "the solution exited while loading"}


def out_of_time(job, count):
    """The tests the job's time did not reach: its budget's, or its one turn's (``turns``)."""
    if job.get("turn_end", math.inf) < job["deadline"]:
        return every_test(count, TIMEOUT, "not run: an assertion item runs in one process, of "
                          f"at most the longest a test may take ({job['unsplit_s']:g} s)")
    return over_budget(job, count)


def as_module(node, filename="test_code"):
    return compile(ast.Module(body=[node], type_ignores=[]), filename, "exec")


def job_statements(setup, tests):
    """Setup and assert statements in source order."""
    return sorted(setup + tests, key=lambda n: (n.lineno, n.col_offset))


def run_one(call, candidate, job, stderr_tail):
    """One test: ``call`` raises AssertionError when it fails."""
    started = time.monotonic()
    candidate.deadline = started + time_left(job)
    oom_before = oom_kills()
    status, message = PASSED, ""
    candidate.failure = None
    try:
        with trusted_clock(time_left(job) + TRUSTED_GRACE_S):
            call()
    except TrustedTimeout:  # in the test's own code; the solution is stopped with it
        status, message = TIMEOUT, "the test ran past its time limit"
        candidate.fail(CandidateTimeout(message))
    except AssertionError as exc:
        status, message = WRONG_ANSWER, shown(exc)
    except CandidateTimeout as exc:
        status, message = TIMEOUT, str(exc)
    except CandidateCrashed as exc:
        status, message = RUNTIME_ERROR, str(exc)
    except Exception as exc:  # noqa: BLE001 - the solution raised through the proxy
        status, message = RUNTIME_ERROR, candidate.describe(exc)
    if candidate.failure is not None and status in (PASSED, WRONG_ANSWER):
        # the test swallowed the solution's crash or timeout (``except:``): still its failure
        status = TIMEOUT if isinstance(candidate.failure, CandidateTimeout) else RUNTIME_ERROR
        message = str(candidate.failure)
    if status != PASSED:
        oom_after = oom_kills()
        if "MemoryError" in message or (
            oom_before is not None and oom_after is not None and oom_after > oom_before
        ):
            status = MEMORY_LIMIT
    if status == TIMEOUT:
        kill_group(candidate.process)  # a stuck call leaves the solution unusable
    elapsed = (time.monotonic() - started) * 1000
    text = (message + "\n" + stderr_tail()).strip()
    return {"status": status, "time_ms": round(elapsed, 3),
            "stderr": text[-job["stderr_tail_bytes"]:]}
