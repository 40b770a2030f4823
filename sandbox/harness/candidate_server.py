"""The candidate server: the solution's module, loaded in a process of its own (the
candidate's uid, its work dir), answering the trusted test process's calls (``candidate``).

It imports as little as it can (``protocol`` and ``objects`` only): it starts once per
assertion job, and every module it imports is start-up time (``subprocess`` alone cost
80-300 ms on a loaded machine).
"""

from __future__ import annotations

import ast
import builtins
import types

from .objects import SETUP_MODULE, setup_classes
from .protocol import (
    CANDIDATE_FRAME_BYTES,
    JOB_FRAME_BYTES,
    decode,
    encode,
    recv_frame,
    send_frame,
)

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
MAX_TYPES = 16  # of an exception's classes, nearest first: the tests need the first they know
# What a class defined here is called on the wire: by its bare name (the setup's, the
# solution's); a class of another module as ``module.qualname``.
LOCAL_MODULES = ("solution", SETUP_MODULE)


def class_name(cls):
    name = cls.__name__
    if getattr(builtins, name, None) is cls or cls.__module__ in LOCAL_MODULES:
        return name
    return f"{cls.__module__}.{cls.__qualname__}"


def error_reply(exc, classes=None):
    """How the solution's exception reaches the test process: its classes' names, nearest
    first (the test process raises the first one it may: ``candidate.raised``), its ``args``
    and attributes as plain data, and its text for the test's verdict."""
    try:
        text = f"{type(exc).__name__}: {exc}"[:500]
    except Exception:  # noqa: BLE001 - its own __str__ failed
        text = type(exc).__name__[:500]
    names = [class_name(k) for k in type(exc).__mro__[:MAX_TYPES]]
    try:
        state = {k: v for k, v in vars(exc).items()
                 if isinstance(k, str) and not k.startswith("__")}  # not __notes__
        value = encode([list(exc.args), state], classes)
    except Exception:  # noqa: BLE001 - arguments that are not plain data: its text stands
        value = encode([[text.partition(": ")[2]], {}])
    return {"error": {"text": text, "types": names, "value": value}}


def resolve(namespace, name):
    """The callable ``name`` of the solution: a method of its ``class Solution`` (LeetCode,
    LiveCodeBench, APPS: ``Solution().name``) unless a top-level name the solution bound
    itself is a function it defined; else that name; None if neither. Names that star imports
    bind (``CALL_PREAMBLE``, a prompt's ``from math import *``) are not in ``namespace``
    (``load``): ``fn_name = "add"`` and a solution of ``pass`` was ``operator.add``, and
    ``Solution().gcd`` was ``math.gcd``."""
    value = namespace.get(name)
    solution = namespace.get("Solution")
    method = isinstance(solution, type) and callable(getattr(solution, name, None))
    if callable(value) and not (method and getattr(value, "__module__", None) != "solution"):
        return value
    if method:
        return getattr(solution(), name)
    return None


def exported(namespace, starred=None):
    """The module's top-level names the test code may use: callables (with where they come
    from, when a module defined them) and imported modules; then what its star imports bound
    (``starred``), as in the dataset's one module."""
    names, modules = [], {}
    seen = list(namespace.items()) + [kv for kv in (starred or {}).items()
                                      if kv[0] not in namespace]
    for name, value in seen[:MAX_NAMES]:
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


def run_setup(source):
    """The trusted test setup, as the test process ran it (its own module, ``SETUP_MODULE``):
    the classes it defines, which the arguments' objects are rebuilt as and the solution may
    use by name, as in MBPP's one module. Only its classes: its other names stay the tests'."""
    namespace = {"__name__": SETUP_MODULE, "__builtins__": __builtins__}
    exec(compile(source, "test_setup", "exec"), namespace)
    return setup_classes(namespace)


STAR_IMPORT = "__star_import__"


class _StarImports(ast.NodeTransformer):
    """``from m import *`` as a call of ``STAR_IMPORT`` (the same line: tracebacks keep the
    solution's line numbers)."""

    def visit_ImportFrom(self, node):
        if [a.name for a in node.names] != ["*"]:
            return node
        call = ast.Call(ast.Name(STAR_IMPORT, ast.Load()),
                        [ast.Constant(node.module or ""), ast.Constant(node.level)], [])
        return ast.copy_location(ast.Expr(call), node)


def load(source, namespace, preamble):
    """Run the solution's ``source`` in ``namespace``; return the names its star imports bound.

    What star imports bind (``preamble``'s ``CALL_PREAMBLE``, and the source's own: a prompt's
    ``from math import *``) goes into a copy of the builtins the module sees instead of its
    globals, so the solution's code finds it while ``namespace`` holds only what the solution
    bound itself (``resolve``): a ``def``, a class, an assignment, a plain import."""
    overlay = dict(vars(builtins))
    starred = {}

    def star_import(module, level):
        imported = __import__(module, namespace, None, ("*",), level)
        public = getattr(imported, "__all__", None)
        for name in public if public is not None else dir(imported):
            if type(name) is str and (public is not None or not name.startswith("_")):
                overlay[name] = starred[name] = getattr(imported, name)

    overlay[STAR_IMPORT] = star_import
    if preamble:
        scratch = {"__name__": "solution", "__builtins__": builtins}
        exec(compile(CALL_PREAMBLE, "preamble", "exec"), scratch)
        overlay.update((k, v) for k, v in scratch.items() if not k.startswith("__"))
    namespace["__builtins__"] = overlay
    code = source
    if "*" in source and "import" in source:  # else no star import: compile the text as is
        code = ast.fix_missing_locations(_StarImports().visit(ast.parse(source, "solution.py")))
    exec(compile(code, "solution.py", "exec"), namespace)
    return starred


def serve_candidate(entry_point, preamble=False, setup=False):
    """Child process: load the solution, then answer proxy calls on fds 3 (in) and 4 (out).

    stdin is /dev/null and stdout goes to stderr, so the solution's prints cannot reach the
    protocol by accident. ``preamble``: run ``CALL_PREAMBLE`` first, its names the solution's
    to use but not to be tested as (``load``). ``setup``: the first frame is the test setup,
    whose classes are defined before the solution's code runs."""
    source = open("solution.py", encoding="utf-8").read()
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    classes = {}
    try:
        if setup:
            try:
                classes = run_setup(recv_frame(3, max_bytes=JOB_FRAME_BYTES)["setup"])
            except Exception as exc:  # noqa: BLE001 - it ran in the test process
                raise RuntimeError(f"test_setup failed in the solution's process: "
                                   f"{type(exc).__name__}: {exc}") from None
        namespace.update(classes)
        starred = load(source, namespace, preamble)
        entry = resolve(namespace, entry_point) if entry_point else None
        names, modules = exported(namespace, starred)
    except BaseException as exc:  # noqa: BLE001 - report any failure, SystemExit included
        send_frame(4, {"load_error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    if entry_point and entry is None:
        send_frame(4, {"load_error": f"the solution defines no function {entry_point!r}"})
        return
    send_frame(4, {"ready": True, "names": names, "modules": modules})
    while True:
        try:
            request = recv_frame(3, max_bytes=JOB_FRAME_BYTES)  # the dataset's arguments
        except EOFError:
            return
        try:
            name = request["name"]
            function = entry if name == entry_point else (
                resolve(namespace, name) or resolve(starred, name))
            if function is None:
                raise NameError(f"name {name!r} is not defined")
            args, kwargs = decode(request["call"], classes)
            reply = {"value": encode(function(*args, **kwargs), classes)}
        except BaseException as exc:  # noqa: BLE001
            reply = error_reply(exc, classes)
        try:
            send_frame(4, reply, max_bytes=CANDIDATE_FRAME_BYTES)
        except ValueError as exc:  # the test process would refuse it: say so, and stay in step
            send_frame(4, {"error": {
                "text": f"ReplyTooLarge: the reply is too large to send to the tests: {exc}",
                "types": [], "value": encode([[], {}])}})
