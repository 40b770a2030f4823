"""A session's interpreter: run as the candidate by ``session.py`` (``python3 -I -u kernel.py
CELLS RESULTS DISPLAY_BYTES``), it reads one cell at a time and runs it in one namespace kept
for the session's life, as a notebook's kernel does: the value of a last bare expression is
displayed (its ``repr``, as Jupyter's ``text/plain``) and kept as ``_``; an exception is
reported as Jupyter reports it (``ename``, ``evalue``, ``traceback``), and the namespace keeps
whatever the cell did before it raised.

Cells come on one pipe, each answer goes back on another (4-byte length, JSON); stdout and
stderr are the process's own fds 1 and 2, which the harness reads, so what a child process or
a C extension prints is the cell's output too. The two pipes move to descriptors no child
inherits; the cell's code can still reach them (``/proc/self/fd``), but all it can forge is
its own session's answers, which the harness bounds and checks.

SIGINT (the harness's interrupt at a cell's time limit) raises KeyboardInterrupt only while a
cell runs: one that lands just after the cell ended must not end the session. A process the
cell forked that reaches the cell's end exits there: it would otherwise read the next cell and
answer beside the interpreter (a fork bomb's copies drain away once the pids run out). Each
answer names the interpreter's pid, so the harness skips any other process's.

Standard library only; it runs in the image's python3 (>= 3.9), outside the harness package
(``-I``: its directory is not on the path, so a cell's ``import`` never finds the harness)."""

import ast
import builtins
import json
import linecache
import os
import signal
import struct
import sys
import traceback


class _Cell:
    running = False


def _interrupt(signum, frame):
    if _Cell.running:
        raise KeyboardInterrupt


def read_frame(fd):
    """One frame's JSON; EOFError when the harness closed the pipe."""
    head = _read_exact(fd, 4)
    (size,) = struct.unpack(">I", head)
    return json.loads(_read_exact(fd, size))


def _read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def write_frame(fd, obj):
    data = json.dumps(obj).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _text(fn, limit):
    """``fn()`` (a repr or str of the cell's object, which may raise or be huge), cut."""
    try:
        text = fn()
    except BaseException as exc:  # noqa: BLE001 - the object's own __repr__ is the cell's
        text = f"<unprintable {type(exc).__name__}>"
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more]"


def describe(exc, limit):
    """Jupyter's error output: the cell's frames only (the kernel's own are left out)."""
    report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    report.stack = traceback.StackSummary.from_list(
        [f for f in report.stack if f.filename != __file__])
    trace, used = [], 0
    for line in report.format():
        used += len(line)
        if used > limit:
            trace.append("... (traceback cut)\n")
            break
        trace.append(line)
    return {"ename": type(exc).__name__, "evalue": _text(lambda: str(exc), limit),
            "traceback": trace}


def run_cell(code, namespace, number, limit):
    """Run ``code`` as cell ``number``; ``{"display": [...], "error": [...]}``."""
    filename = f"<cell-{number}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        tree = ast.parse(code, filename, "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        return {"display": [], "error": [describe(exc, limit)]}
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    value = None
    _Cell.running = True
    try:
        exec(compile(tree, filename, "exec"), namespace)  # noqa: S102 - it is the cell
        if last is not None:
            value = eval(compile(last, filename, "eval"), namespace)  # noqa: S307
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too
        return {"display": [], "error": [describe(exc, limit)]}
    finally:
        _Cell.running = False
    if value is None:
        return {"display": [], "error": []}
    namespace["_"] = value
    return {"display": [{"text/plain": _text(lambda: repr(value), limit)}], "error": []}


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # the cell closed or replaced it: fds 1 and 2 are what the harness reads


def main(argv):
    cells_fd, results_fd, limit = (int(a) for a in argv[1:4])
    cells, results = os.dup(cells_fd), os.dup(results_fd)  # dup: not inheritable
    os.close(cells_fd)
    os.close(results_fd)
    sys.path.insert(0, "")  # the work dir, as in Jupyter's kernel: an uploaded module imports
    signal.signal(signal.SIGINT, _interrupt)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    me = os.getpid()
    write_frame(results, {"ready": True, "python": sys.version.split()[0], "pid": me})
    number = 0
    while True:
        try:
            cell = read_frame(cells)
        except EOFError:
            return
        number += 1
        reply = run_cell(str(cell.get("code", "")), namespace, number, limit)
        _flush()
        if os.getpid() != me:  # a child the cell forked, at the cell's end: never a kernel
            os._exit(0)
        write_frame(results, {**reply, "pid": me})


if __name__ == "__main__":
    main(sys.argv)
