"""The candidate's module in an assertion job: loaded in a process of its own (the "candidate
server"), reached from the trusted test process through proxies.

The test code sees what the dataset's own harness sees when it runs the solution and the
tests in one module: ``candidate`` (the entry point) and the module's other top-level names.
Here each of those names is a proxy: calling it sends the arguments to the candidate server
and gets the return value back as tagged JSON that decodes only to plain data
(``protocol.encode``). So redefining ``check``, monkeypatching builtins, ``sys.exit(0)``
before the tests, printing "all tests passed", or returning an object whose ``__eq__`` is
always True cannot make an assertion pass: the assertion is evaluated in the trusted process,
on plain values, and a candidate that exits makes every later call fail. A name that shadows
a builtin (``len``, ``sorted``) or one the tests define themselves is never taken from the
candidate; a module it imported (``math``) or a function it took from one (``from math import
sqrt``) is the trusted process's own import of that module, for an allowed list of pure
standard modules.
"""

from __future__ import annotations

import builtins
import importlib
import os
import struct
import subprocess
import sys
import types

from . import PACKAGE_PARENT
from .processes import candidate_started, limit_child
from .protocol import decode, encode, recv_frame, send_frame

# Standard modules whose names the test code may take from the candidate's imports: pure
# computation, no I/O at import (``this`` would print to PID 1's stdout, the verdict channel).
TRUSTED_MODULES = frozenset({
    "array", "bisect", "builtins", "calendar", "cmath", "collections", "collections.abc",
    "copy", "dataclasses", "datetime", "decimal", "enum", "fractions", "functools", "hashlib",
    "heapq", "itertools", "json", "math", "numbers", "operator", "random", "re", "statistics",
    "string", "textwrap", "typing", "unicodedata",
})
BUILTIN_NAMES = frozenset(dir(builtins))
# What the call-based datasets' harness puts before a solution (verl's prime_code copy of
# APPS's testing_util, which PrimeIntellect's rows are scored with): LeetCode-style solutions
# use List, Counter, inf, ... without importing them.
CALL_PREAMBLE = (
    "from string import *\nfrom re import *\nfrom datetime import *\n"
    "from collections import *\nfrom heapq import *\nfrom bisect import *\n"
    "from copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\n"
    "from operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\n"
    "from builtins import *\nfrom typing import *\nimport string\nimport re\n"
    "import datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\n"
    "import math\nimport random\nimport statistics\nimport itertools\nimport functools\n"
    "import operator\nimport io\nimport sys\nimport json\nsys.setrecursionlimit(6*10**5)\n"
)
MAX_NAMES = 4000


class CandidateCrashed(Exception):
    pass


class CandidateTimeout(Exception):
    pass


class CandidateNotLoaded(BaseException):
    """The test code called the candidate before it was loaded (see ``asserts.run_asserts``)."""


# --- in the candidate server (the candidate's uid, its work dir) ------------------------------


def resolve(namespace, name):
    """The callable ``name`` of the solution: a top-level function, or a method of ``class
    Solution`` (LeetCode, LiveCodeBench, APPS: ``Solution().name``); None if neither."""
    value = namespace.get(name)
    if callable(value):
        return value
    solution = namespace.get("Solution")
    if isinstance(solution, type) and callable(getattr(solution, name, None)):
        return getattr(solution(), name)
    return None


def exported(namespace):
    """The module's top-level names the test code may use: callables (with where they come
    from, when a module defined them) and imported modules."""
    names, modules = [], {}
    for name, value in list(namespace.items())[:MAX_NAMES]:
        if name.startswith("__") or not isinstance(name, str):
            continue
        if isinstance(value, types.ModuleType):
            modules[name] = str(getattr(value, "__name__", ""))
        elif callable(value):
            origin = getattr(value, "__module__", None)
            qualname = getattr(value, "__qualname__", None)
            names.append([name, origin if isinstance(origin, str) else None,
                          qualname if isinstance(qualname, str) else None])
    return names, modules


def serve_candidate(entry_point, preamble=False):
    """Child process: load the solution, then answer proxy calls on fds 3 (in) and 4 (out).

    stdin is /dev/null and stdout goes to stderr, so the solution's prints cannot reach the
    protocol by accident. ``preamble``: run ``CALL_PREAMBLE`` first, in the same namespace
    (the solution's line numbers stay its own)."""
    source = open("solution.py", encoding="utf-8").read()
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        if preamble:
            exec(compile(CALL_PREAMBLE, "preamble", "exec"), namespace)
        exec(compile(source, "solution.py", "exec"), namespace)
        entry = resolve(namespace, entry_point) if entry_point else None
        names, modules = exported(namespace)
    except BaseException as exc:  # noqa: BLE001 - report any failure, SystemExit included
        send_frame(4, {"load_error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    if entry_point and entry is None:
        send_frame(4, {"load_error": f"the solution defines no function {entry_point!r}"})
        return
    send_frame(4, {"ready": True, "names": names, "modules": modules})
    while True:
        try:
            request = recv_frame(3)
        except EOFError:
            return
        try:
            name = request["name"]
            function = entry if name == entry_point else resolve(namespace, name)
            if function is None:
                raise NameError(f"name {name!r} is not defined")
            result = function(*decode(request["args"]), **decode(request["kwargs"]))
            reply = {"value": encode(result)}
        except BaseException as exc:  # noqa: BLE001
            reply = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        send_frame(4, reply)


# --- in the trusted test process ---------------------------------------------------------------


class Candidate:
    """The trusted process's handle on the candidate server."""

    def __init__(self):
        self.process = self.to_child = self.from_child = self.deadline = None

    def function(self, name):
        return CandidateFunction(self, name)

    def call(self, name, args, kwargs):
        if self.process is None:
            raise CandidateNotLoaded
        try:
            send_frame(self.to_child, {"name": name, "args": encode(args),
                                       "kwargs": encode(kwargs)})
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

    def start(self, job, workdir, env, stderr_fd):
        """The candidate server, as the candidate's uid in its work dir; its stdout and stderr
        go to ``stderr_fd``."""
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        code = ("import os, sys; os.dup2({r}, 3); os.dup2({w}, 4); "
                "os.dup2(os.open(os.devnull, os.O_RDONLY), 0); os.dup2(2, 1); "
                "sys.path.insert(0, {p!r}); from harness.candidate import serve_candidate; "
                "serve_candidate({e!r}, {c!r})"
                ).format(r=to_child_r, w=from_child_w, p=PACKAGE_PARENT, e=job.get("entry_point"),
                         c=job.get("calls") is not None)
        candidate_started()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", code], stdin=subprocess.DEVNULL, stdout=stderr_fd,
                stderr=stderr_fd, env=env, preexec_fn=limit_child(job["memory_mb"], None, workdir),
                pass_fds=(to_child_r, from_child_w),
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.to_child, self.from_child = to_child_w, from_child_r

    def close(self):
        for fd in (self.to_child, self.from_child):
            if fd is not None:
                os.close(fd)
        self.to_child = self.from_child = None


class CandidateFunction:
    """Stands for one of the solution's functions inside the test code."""

    __slots__ = ("candidate", "name")

    def __init__(self, candidate, name):
        self.candidate, self.name = candidate, name

    def __call__(self, *args, **kwargs):
        return self.candidate.call(self.name, args, kwargs)

    def __repr__(self):
        return f"<the solution's {self.name}>"


def valid_hello(hello):
    """The candidate server's first frame: ready with its names, or why it did not load."""
    if not isinstance(hello, dict):
        return False
    if set(hello) == {"load_error"}:
        return isinstance(hello["load_error"], str)
    return (set(hello) == {"ready", "names", "modules"} and hello["ready"] is True
            and isinstance(hello["names"], list) and isinstance(hello["modules"], dict)
            and all(isinstance(n, list) and len(n) == 3 and isinstance(n[0], str)
                    for n in hello["names"])
            and all(isinstance(v, str) for v in hello["modules"].values()))


def trusted_copy(module_name, qualname):
    """The trusted process's own ``module_name.qualname`` when the module is allowed, else
    None."""
    if module_name not in TRUSTED_MODULES or not qualname:
        return None
    try:
        value = importlib.import_module(module_name)
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError):
        return None
    return value


def install(namespace, candidate, hello):
    """Bind the candidate's top-level names in the test namespace, except those it already
    has (the tests' own, ``test_setup``'s) and the builtins' names."""
    def free(name):
        return name.isidentifier() and name not in namespace and name not in BUILTIN_NAMES

    for alias, module_name in hello["modules"].items():
        if free(alias) and module_name in TRUSTED_MODULES:
            namespace[alias] = importlib.import_module(module_name)
    for name, origin, qualname in hello["names"]:
        if free(name):
            trusted = trusted_copy(origin, qualname)
            namespace[name] = trusted if trusted is not None else candidate.function(name)
