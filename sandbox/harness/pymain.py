"""A Python program run in this process as ``python3 file`` would run it: a fork of the zygote
(``zygote``) becomes the program this way, without starting an interpreter."""

from __future__ import annotations

import os
import sys

from . import PACKAGE_PARENT
from .processes import apply_limits


def run_as_main(code, filename, finish=False):
    """Exit status of running ``code`` the way ``python3 file`` would; ``finish``: and end as
    the interpreter ends, non-daemon threads joined and atexit functions run (a forked
    program otherwise ends at its last line, and a thread's output is lost)."""
    namespace = {"__name__": "__main__", "__file__": filename, "__builtins__": __builtins__}
    status = 0
    try:
        exec(code, namespace)
    except SystemExit as exc:
        status = exit_status(exc)
    except BaseException as exc:  # noqa: BLE001 - uncaught, printed like Python does
        print_uncaught(exc, exc.__traceback__.tb_next)  # from the program's frame
        status = 1
    if finish:
        try:
            threading = sys.modules.get("threading")
            if threading is not None:
                threading._shutdown()
            import atexit

            atexit._run_exitfuncs()
        except SystemExit as exc:
            status = exit_status(exc)
        except BaseException as exc:  # noqa: BLE001
            print_uncaught(exc, exc.__traceback__)
            status = status or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            status = status or 1
    return status


def print_uncaught(exc, tb):
    """Print an uncaught exception as Python does: through ``sys.excepthook`` (the program
    may have set its own), or the default hook when that one fails."""
    exc = exc.with_traceback(tb)  # the hook prints the exception's own, whatever it is given
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException:  # noqa: BLE001
        sys.__excepthook__(type(exc), exc, tb)


def exit_status(exc):
    """The exit status of an uncaught SystemExit, its message printed as Python prints it."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    sys.stderr.write(f"{exc.code}\n")
    return 1


def run_script(request):
    """A snippet's child (op ``script``), as ``python3 -s main.py`` runs it: the source comes
    on fd 3 and is read and compiled here, after the uid drop and under the program's limits,
    so it never enters the zygote's memory (where a later program forked from it could read
    it); the script's directory first on the path; stdout unbuffered as PYTHONUNBUFFERED asks;
    a syntax error printed as Python prints it; at the end, threads joined and atexit run."""
    import io

    cwd, path = request["cwd"], os.path.join(request["cwd"], request["argv0"])
    os.chdir(cwd)
    os.environ.update(request["env"])
    apply_limits(request["memory_mb"], request["cpu_s"])
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    # the zygote's -I ignored these variables; the program's python3 would not
    sys.dont_write_bytecode = bool(request["env"].get("PYTHONDONTWRITEBYTECODE"))
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r")), encoding="utf-8")
    raw = io.FileIO(1, "w")
    sys.stdout = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw),
                                  encoding="utf-8", write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w"), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    with os.fdopen(3, "rb") as f:
        source = f.read()
    try:
        code = compile(source, path, "exec")
    except BaseException as exc:  # noqa: BLE001 - SyntaxError, null bytes, MemoryError
        print_uncaught(exc, None)  # no frames: python3 prints none for these
        sys.stderr.flush()
        return 1
    sys.argv = [request["argv0"]]
    sys.path[:] = [cwd, *(p for p in sys.path if p != PACKAGE_PARENT)]
    return run_as_main(code, path, finish=True)
