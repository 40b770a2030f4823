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
from .objects import set_state
from .processes import candidate_started, kill_group, limit_child
from .protocol import decode, encode, recv_frame, send_frame

# Standard modules whose names the test code may take from the candidate's imports: pure
# computation, no I/O at import (``this`` would print to PID 1's stdout, the verdict channel).
# Not ``builtins``: a module alias the candidate reports is bound to the trusted process's
# own import, and builtins would hand the test code eval under a name the candidate chose.
TRUSTED_MODULES = frozenset({
    "array", "bisect", "calendar", "cmath", "collections", "collections.abc",
    "copy", "dataclasses", "datetime", "decimal", "enum", "fractions", "functools", "hashlib",
    "heapq", "itertools", "json", "math", "numbers", "operator", "random", "re", "statistics",
    "string", "textwrap", "typing", "unicodedata",
})
# Modules whose public callables may stand for a name the candidate imported from them
# (``from math import gcd``): pure computation on the values passed. Not builtins (eval,
# exec, open), typing (get_type_hints evaluates strings), dataclasses (make_dataclass execs),
# calendar (prints): the candidate names the origin, so a forged one must buy nothing.
NAME_SOURCES = frozenset({
    "array", "bisect", "cmath", "collections", "copy", "datetime", "decimal", "fractions",
    "functools", "heapq", "itertools", "json", "math", "numbers", "operator", "random",
    "statistics", "string", "unicodedata",
})
BUILTIN_NAMES = frozenset(dir(builtins))


def shown(exc):
    """``Name: message`` for an exception a solution raised through the proxy, whose message
    it chose: its ``str`` may itself raise (an int past Python's 4300 digits, a ``__str__``
    of its own), which inside a test's handler failed the harness and made a wrong answer
    "broken tests", a null. Then the name alone, with a note."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - whatever its str raised: the verdict stands
        return f"{type(exc).__name__} (its message could not be shown)"


class CandidateCrashed(BaseException):
    """The solution's process died or broke the protocol. A BaseException, so a test's own
    ``except Exception`` (written to expect a raise) cannot swallow it into a pass."""


class CandidateTimeout(BaseException):
    """The solution ran past its time; a BaseException for the same reason."""


class CandidateNotLoaded(BaseException):
    """The test code called the candidate before it was loaded (see ``asserts.run_asserts``)."""


# --- in the trusted test process ---------------------------------------------------------------


class Candidate:
    """The trusted process's handle on the candidate server."""

    # Called before the solution's process starts (the tester tells PID 1 too)
    on_start = staticmethod(candidate_started)
    # Only a fork server's child drops to the candidate's uid where this process cannot
    # (the tester): no fresh interpreter then, which would run under this process's uid
    forks_only = False

    def __init__(self):
        self.process = self.to_child = self.from_child = self.deadline = None
        self.failure = None  # the CandidateCrashed/CandidateTimeout of the current test
        self.last_raised = None  # (the exception raised for the solution's, its text)
        self.classes = {}  # what the trusted test setup defined: objects.setup_classes

    def fail(self, error):
        """Remember ``error`` for the test that caused it (``asserts.run_one`` checks, so a
        test that swallows it, even with a bare ``except:``, still fails), and return it."""
        self.failure = error
        return error

    def function(self, name, plain=False):
        """A proxy for the solution's ``name``; ``plain``: its return value must be plain data,
        no object of the setup's (a call-based test's expected value is JSON)."""
        return CandidateFunction(self, name, plain)

    def call(self, name, args, kwargs, plain=False):
        if self.process is None:
            raise CandidateNotLoaded
        try:
            send_frame(self.to_child, {"name": name,
                                       "call": encode([list(args), kwargs], self.classes)})
            reply = recv_frame(self.from_child, self.deadline)
        except TimeoutError:
            raise self.fail(CandidateTimeout("the solution ran past the time limit")) from None
        except (EOFError, OSError, ValueError, struct.error, RecursionError, MemoryError):
            raise self.fail(CandidateCrashed(
                "the solution's process ended or broke the protocol")) from None
        if not isinstance(reply, dict) or len(reply) != 1 or not ({"error", "value"} & set(reply)):
            raise self.fail(CandidateCrashed("the solution's process broke the protocol"))
        if "error" in reply:
            raise self.exception_for(reply["error"])
        try:
            return decode(reply["value"], None if plain else self.classes)
        except (ValueError, TypeError, OverflowError, RecursionError, AttributeError) as exc:
            raise self.fail(CandidateCrashed(
                f"the solution returned a value that is not plain data or objects of the "
                f"test setup's classes: {str(exc)[:200]}")) from None

    def exception_for(self, error):
        """The exception to raise in the test code for the solution's ``error`` reply
        (``candidate_server.error_reply``); remembered with the solution's own text for the
        test's verdict (``describe``)."""
        try:
            text, names, value = error["text"], error["types"], error["value"]
            args, state = decode(value, self.classes)
            if not (type(text) is str and type(names) is list and len(names) <= 32
                    and all(type(n) is str for n in names) and type(args) is list
                    and type(state) is dict):
                raise ValueError
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError, AttributeError):
            return self.fail(CandidateCrashed("the solution's process broke the protocol"))
        exc = raised(text[:500], names, tuple(args), state, self.classes)
        self.last_raised = (exc, text[:500])
        return exc

    def describe(self, exc):
        """An exception in a test's verdict: the solution's own words for one it raised."""
        if self.last_raised is not None and self.last_raised[0] is exc:
            text, name = self.last_raised[1], type(exc).__name__
            return text if text.partition(":")[0] == name else f"{text} (as {name})"
        return shown(exc)

    def start(self, job, workdir, env, stderr_fd, zygote=None):
        """The candidate server, as the candidate's uid in its work dir; its stdout and stderr
        go to ``stderr_fd``. Forked from the warm zygote when it is up (no interpreter start,
        no imports: ~10x faster on a loaded machine), else a fresh interpreter."""
        self.spawn(job, workdir, env, stderr_fd, zygote)
        if self.classes:  # its first frame: the setup, to run before the solution
            try:
                send_frame(self.to_child, {"setup": job.get("test_setup") or ""})
            except OSError:
                pass  # it died: its hello says so

    def spawn(self, job, workdir, env, stderr_fd, zygote):
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.to_child, self.from_child = to_child_w, from_child_r
        setup = bool(self.classes)
        self.on_start()
        try:
            if zygote is not None and zygote.alive():
                devnull = os.open(os.devnull, os.O_RDONLY)
                try:
                    self.process = zygote.serve(
                        [devnull, stderr_fd, stderr_fd, to_child_r, from_child_w],
                        job["memory_mb"], workdir, env, job.get("entry_point"),
                        job.get("calls") is not None, setup)
                    return
                except (OSError, EOFError, ValueError, KeyError, TimeoutError):
                    kill_group(zygote.process)  # replaced after this execution
                finally:
                    os.close(devnull)
            if self.forks_only:
                raise OSError("no fork server to start the solution from")
            code = ("import os, sys; os.dup2({r}, 3); os.dup2({w}, 4); "
                    "os.dup2(os.open(os.devnull, os.O_RDONLY), 0); os.dup2(2, 1); "
                    "sys.path.insert(0, {p!r}); "
                    "from harness.candidate_server import serve_candidate; "
                    "serve_candidate({e!r}, {c!r}, {s!r})"
                    ).format(r=to_child_r, w=from_child_w, p=PACKAGE_PARENT,
                             e=job.get("entry_point"), c=job.get("calls") is not None, s=setup)
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", code], stdin=subprocess.DEVNULL, stdout=stderr_fd,
                stderr=stderr_fd, env=env, preexec_fn=limit_child(job["memory_mb"], None, workdir),
                pass_fds=(to_child_r, from_child_w),
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)

    def close(self):
        for fd in (self.to_child, self.from_child):
            if fd is not None:
                os.close(fd)
        self.to_child = self.from_child = None


# Exceptions that the iteration protocol reads as "no more items": raised from a call inside
# a test's ``map()`` or ``filter()``, they would end it silently, and ``all(map(...))`` would
# pass. Relayed as RuntimeError, as PEP 479 does when they leave a generator.
ENDS_ITERATION = (StopIteration, StopAsyncIteration)


def raised(text, names=None, args=None, state=None, classes=None):
    """The solution's exception as the test code should see it (a test's ``except
    ValueError`` or ``pytest.raises``-style check of a correct solution must work): an
    instance of the first of its classes' ``names`` (nearest first) that is a builtin
    exception, a class the trusted test setup defined (``classes``), or one of a trusted
    standard module's; with its ``args`` and attributes. None of those classes' own code runs
    to make it (``rebuilt``). Raising such an exception is nothing the solution could not do
    anyway, except one that ends an iteration (``ENDS_ITERATION``): in the test code's
    iteration, not the solution's; that, and a class the test process does not know, is a
    RuntimeError. Without ``names``, the one in ``text`` ("Name: message")."""
    if names is None:
        name, _, message = text.partition(": ")
        names, args = [name], (message,)
    for name in names:
        kind = exception_class(name, classes or {})
        if kind is None:
            continue
        if issubclass(kind, ENDS_ITERATION):
            break
        exc = rebuilt(kind, args, state or {})
        if exc is not None and not in_bounds(exc):
            break
        if exc is not None:
            return exc
    return RuntimeError(f"the solution raised {text}")


# What each Unicode error's ``object`` must be. Their ``__str__`` in the image's Python (3.11)
# reads ``object[start]`` unchecked when ``end == start + 1``: a solution's start of -2**40
# made the test process read memory there and segfaulted PID 1 (the container died).
UNICODE_OBJECTS = ((UnicodeDecodeError, bytes), (UnicodeEncodeError, str),
                   (UnicodeTranslateError, str))


def in_bounds(exc):
    """Whether a Unicode error's ``start`` and ``end`` lie within its ``object``, which is of
    the type its ``__str__`` reads (one made by ``__new__`` alone has none, and both are 0)."""
    for kind, of in UNICODE_OBJECTS:
        if isinstance(exc, kind):
            start, end, held = exc.start, exc.end, exc.object
            if held is None:
                return start == end == 0
            return type(held) is of and 0 <= start <= end <= len(held)
    return True


def exception_class(name, classes):
    """The test process's own exception class the solution's ``name`` stands for, or None:
    a class of the trusted setup's by its name (the test code's ``except MyError`` names
    that one), a builtin, or ``module.Name`` of a trusted standard module this process has
    imported already (nothing is imported by a name from the solution)."""
    if type(name) is not str or len(name) > 200:
        return None
    if "." in name:
        module, _, attr = name.rpartition(".")
        if module.split(".")[0] not in TRUSTED_MODULES or not attr.isidentifier() or \
                attr.startswith("_") or not isinstance(sys.modules.get(module), types.ModuleType):
            return None
        kind = getattr(sys.modules[module], attr, None)
    elif name in classes:
        kind = classes[name]
    else:
        kind = getattr(builtins, name, None) if name.isidentifier() else None
    return kind if isinstance(kind, type) and issubclass(kind, Exception) else None


def rebuilt(kind, args, state):
    """An instance of ``kind`` with ``args`` and the attributes ``state``, or None. A builtin
    is called (C code, on plain data: what a solution could raise anyway); any other class is
    made by its nearest builtin base's ``__new__``, so neither its ``__new__`` nor its
    ``__init__`` runs, only what the solution's data says is set."""
    base = next(k for k in kind.__mro__ if getattr(builtins, k.__name__, None) is k)
    exc = None
    if base is kind:
        try:
            exc = kind(*args)
        except Exception:  # noqa: BLE001 - arguments its constructor does not take
            exc = None
    try:
        if exc is None:
            exc = base.__new__(kind)
            BaseException.args.__set__(exc, args)
    except Exception:  # noqa: BLE001
        return None
    try:
        set_state(exc, list(state.items()))
    except ValueError:
        pass  # its attributes do not fit the class: it keeps its type and args
    return exc


class CandidateFunction:
    """Stands for one of the solution's functions inside the test code."""

    __slots__ = ("candidate", "name", "plain")

    def __init__(self, candidate, name, plain=False):
        self.candidate, self.name, self.plain = candidate, name, plain

    def __call__(self, *args, **kwargs):
        return self.candidate.call(self.name, args, kwargs, self.plain)

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
            and all(isinstance(n, list) and len(n) == 3
                    and all(isinstance(x, str) or (i and x is None) for i, x in enumerate(n))
                    for n in hello["names"])
            and all(isinstance(k, str) for k in hello["modules"])
            and all(isinstance(v, str) for v in hello["modules"].values()))


def trusted_copy(module_name, qualname):
    """The trusted process's own public callable ``module_name.qualname`` (one plain name,
    no path: ``random._os`` is not reachable) when the module is a name source, else None.
    The candidate reports both strings and may forge them (``__module__ = "builtins"``,
    ``__qualname__ = "eval"`` ran its string as root here), so nothing but a pure public
    callable of an allowed module can come of them."""
    if (module_name not in NAME_SOURCES or not isinstance(qualname, str)
            or not qualname.isidentifier() or qualname.startswith("_")):
        return None
    try:
        value = getattr(importlib.import_module(module_name), qualname)
    except (ImportError, AttributeError):
        return None
    if isinstance(value, types.ModuleType) or not callable(value):
        return None
    return value


def install(namespace, candidate, hello):
    """Bind the candidate's top-level names in the test namespace, except those it already
    has (the tests' own, ``test_setup``'s) and the builtins' names."""
    def free(name):  # a forged hello may name anything: no dunder (__builtins__), no builtin
        return (name.isidentifier() and not name.startswith("__") and name not in namespace
                and name not in BUILTIN_NAMES)

    for alias, module_name in hello["modules"].items():
        if free(alias) and module_name in TRUSTED_MODULES:
            namespace[alias] = importlib.import_module(module_name)
    for name, origin, qualname in hello["names"]:
        if free(name):
            trusted = trusted_copy(origin, qualname)
            namespace[name] = trusted if trusted is not None else candidate.function(name)
