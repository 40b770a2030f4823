"""An assertion job (HumanEval, MBPP): the dataset's test code runs in this trusted process;
the candidate's module runs in a separate "candidate server" process, and ``candidate(...)``
in the test code is a proxy that calls into it.

The proxy sends the arguments and gets the return value back as tagged JSON that decodes only
to plain data (``protocol.encode``). So redefining ``check``, monkeypatching builtins,
``sys.exit(0)`` before the tests, printing "all tests passed", or returning an object whose
``__eq__`` is always True cannot make an assertion pass: the assertion is evaluated here, on
plain values, and a candidate that exits makes every later call fail.
"""

from __future__ import annotations

import ast
import os
import struct
import subprocess
import sys
import time

from . import PACKAGE_PARENT
from .processes import candidate_started, kill_group, limit_child, oom_kills
from .protocol import decode, encode, recv_frame, send_frame
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
from .verdicts import over_budget, skipped, time_left


def serve_candidate(entry_point):
    """Child process: load the solution, then answer proxy calls on fds 3 (in) and 4 (out).

    stdin is /dev/null and stdout goes to stderr, so the solution's prints cannot reach the
    protocol by accident."""
    source = open("solution.py", encoding="utf-8").read()
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - report any failure, SystemExit included
        send_frame(4, {"load_error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    function = namespace.get(entry_point)
    if not callable(function):
        send_frame(4, {"load_error": f"the solution defines no function {entry_point!r}"})
        return
    send_frame(4, {"ready": True})
    while True:
        try:
            request = recv_frame(3)
        except EOFError:
            return
        try:
            args = decode(request["args"])
            kwargs = decode(request["kwargs"])
            result = function(*args, **kwargs)
            reply = {"value": encode(result)}
        except BaseException as exc:  # noqa: BLE001
            reply = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        send_frame(4, reply)


class CandidateCrashed(Exception):
    pass


class CandidateTimeout(Exception):
    pass


class CandidateNotLoaded(BaseException):
    """The test code called the candidate before it was loaded (see ``run_asserts``)."""


class CandidateProxy:
    """Stands for the solution's function inside the test code, in this trusted process."""

    def __init__(self):
        self.process = self.to_child = self.from_child = self.deadline = None

    def __call__(self, *args, **kwargs):
        if self.process is None:
            raise CandidateNotLoaded
        try:
            send_frame(self.to_child, {"args": encode(args), "kwargs": encode(kwargs)})
            reply = recv_frame(self.from_child, self.deadline)
        except TimeoutError:
            raise CandidateTimeout("the solution ran past the time limit") from None
        except (EOFError, OSError, ValueError, struct.error, RecursionError, MemoryError):
            raise CandidateCrashed("the solution's process ended or broke the protocol") from None
        if not isinstance(reply, dict) or len(reply) != 1 or not ({"error", "value"} & set(reply)):
            raise CandidateCrashed("the solution's process broke the protocol")
        if "error" in reply:
            raise RuntimeError(f"the solution raised {str(reply['error'])[:500]}")
        try:
            return decode(reply["value"])
        except (ValueError, TypeError, OverflowError, RecursionError, AttributeError):
            raise CandidateCrashed("the solution returned a value that is not plain data") from None


def split_tests(test_code):
    """(setup statements, tests): each top-level ``assert`` is one test; a ``check`` function
    makes the whole suite one test, called with the candidate."""
    tree = ast.parse(test_code, "test_code")
    if any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
        return tree.body, ["check"]
    setup = [n for n in tree.body if not isinstance(n, ast.Assert)]
    asserts = [n for n in tree.body if isinstance(n, ast.Assert)]
    return setup, asserts


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


def run_asserts(job, workdir, env):
    """The dataset's setup that does not use the candidate runs first: a failure there is the
    dataset's (``bad_tests``, null). Then the candidate loads, and from there on every failure
    is a failed test (issue 10)."""
    try:
        setup, tests = split_tests(job["test_code"])
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return {"status": BAD_TESTS, "detail": f"test_code does not parse: {exc}"}
    if not tests:
        return {"status": BAD_TESTS, "detail": "test_code has no assert and no check()"}
    proxy = CandidateProxy()
    namespace = {"__name__": "__test__", "candidate": proxy, job["entry_point"]: proxy}
    statements = list(setup) if tests == ["check"] else job_statements(setup, tests)
    names = {"candidate", job["entry_point"]}
    while statements and not isinstance(statements[0], ast.Assert) and not mentions(
            statements[0], names):
        try:
            exec(as_module(statements[0]), namespace)
        except CandidateNotLoaded:
            break  # it reached the candidate through a helper: run it once the candidate is up
        except Exception as exc:  # noqa: BLE001 - the dataset's test code is broken
            return {"status": BAD_TESTS,
                    "detail": f"test setup failed: {type(exc).__name__}: {exc}"}
        statements.pop(0)

    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    stderr_fd = os.memfd_create("stderr")
    code = ("import os, sys; os.dup2({r}, 3); os.dup2({w}, 4); "
            "os.dup2(os.open(os.devnull, os.O_RDONLY), 0); os.dup2(2, 1); "
            "sys.path.insert(0, {p!r}); from harness.asserts import serve_candidate; "
            "serve_candidate({e!r})"
            ).format(r=to_child_r, w=from_child_w, p=PACKAGE_PARENT, e=job["entry_point"])
    candidate_started()
    process = subprocess.Popen(
        [sys.executable, "-I", "-c", code], stdin=subprocess.DEVNULL, stdout=stderr_fd,
        stderr=stderr_fd, env=env, preexec_fn=limit_child(job["memory_mb"], None, workdir),
        pass_fds=(to_child_r, from_child_w),
    )
    os.close(to_child_r)
    os.close(from_child_w)
    proxy.process, proxy.to_child, proxy.from_child = process, to_child_w, from_child_r

    def stderr_tail():
        size = os.fstat(stderr_fd).st_size
        data = os.pread(stderr_fd, job["stderr_tail_bytes"],
                        max(0, size - job["stderr_tail_bytes"]))
        return data.decode("utf-8", "backslashreplace")

    def fail_all(status, message):
        return {"status": OK, "tests": [{"status": status, "time_ms": 0.0, "stderr": message}
                                          for _ in tests]}

    try:
        try:
            hello = recv_frame(from_child_r, time.monotonic() + time_left(job))
        except TimeoutError:
            return fail_all(TIMEOUT, "the solution did not finish loading in time")
        except Exception:  # noqa: BLE001 - EOF, or a frame that is not JSON
            hello = {"load_error": "the solution exited while loading"}
        if hello != {"ready": True} and not (
                isinstance(hello, dict) and set(hello) == {"load_error"}
                and isinstance(hello["load_error"], str)):
            return fail_all(RUNTIME_ERROR, "the solution's process broke the protocol")
        if "load_error" in hello:
            detail = hello["load_error"] + "\n" + stderr_tail()
            status = SYNTAX_ERROR if hello["load_error"].startswith("SyntaxError") else OK
            return {"status": status, "detail": detail.strip()[-job["stderr_tail_bytes"]:],
                    "tests": [{"status": RUNTIME_ERROR, "time_ms": 0.0,
                               "stderr": detail[-job["stderr_tail_bytes"]:]} for _ in tests]}
        results = []
        if tests == ["check"]:
            statements.append("check")
        for node in statements:
            if time_left(job) <= 0:
                return {"status": OK,
                        "tests": results + over_budget(job, len(tests) - len(results))}
            if node == "check" or isinstance(node, ast.Assert):
                module = None if node == "check" else as_module(node)
                call = ((lambda: namespace["check"](proxy)) if module is None
                        else (lambda: exec(module, namespace)))  # noqa: B023 - called at once
                results.append(run_one(call, proxy, job, stderr_tail))
                if results[-1]["status"] != PASSED and job.get("stop_on_failure"):
                    return {"status": OK,
                            "tests": results + skipped(len(tests) - len(results))}
                continue
            proxy.deadline = time.monotonic() + time_left(job)
            try:
                exec(as_module(node), namespace)
            except Exception as exc:  # noqa: BLE001 - after the candidate ran: its doing
                message = f"the test code failed after the solution loaded: " \
                          f"{type(exc).__name__}: {exc}"
                return {"status": OK, "tests": results + [
                    {"status": RUNTIME_ERROR, "time_ms": 0.0, "stderr": message[-2000:]}
                    for _ in range(len(tests) - len(results))]}
        return {"status": OK, "tests": results}
    finally:
        for fd in (to_child_w, from_child_r, stderr_fd):
            os.close(fd)
        kill_group(process)
        process.wait()


def as_module(node):
    return compile(ast.Module(body=[node], type_ignores=[]), "test_code", "exec")


def job_statements(setup, tests):
    """Setup and assert statements in source order."""
    return sorted(setup + tests, key=lambda n: (n.lineno, n.col_offset))


def run_one(call, proxy, job, stderr_tail):
    started = time.monotonic()
    proxy.deadline = started + time_left(job)
    oom_before = oom_kills()
    status, message = PASSED, ""
    try:
        call()
    except AssertionError as exc:
        status, message = WRONG_ANSWER, f"AssertionError: {exc}"
    except CandidateTimeout as exc:
        status, message = TIMEOUT, str(exc)
    except CandidateCrashed as exc:
        status, message = RUNTIME_ERROR, str(exc)
    except Exception as exc:  # noqa: BLE001 - the solution raised through the proxy
        status, message = RUNTIME_ERROR, f"{type(exc).__name__}: {exc}"
    if status != PASSED:
        oom_after = oom_kills()
        if "MemoryError" in message or (
            oom_before is not None and oom_after is not None and oom_after > oom_before
        ):
            status = MEMORY_LIMIT
    if status == TIMEOUT:
        kill_group(proxy.process)  # a stuck call leaves the solution unusable
    elapsed = (time.monotonic() - started) * 1000
    text = (message + "\n" + stderr_tail()).strip()
    return {"status": status, "time_ms": round(elapsed, 3),
            "stderr": text[-job["stderr_tail_bytes"]:]}
