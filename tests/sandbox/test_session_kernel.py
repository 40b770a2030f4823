"""The session interpreter (``sandbox/harness/kernel.py``) on its own: a cell's value and
exception as a notebook reports them, the namespace kept, and the interrupt that stops a cell
but never the interpreter between cells. No Docker: the kernel is a plain script (the
container tests are tests/reward_server/run_code/test_sessions.py)."""

from __future__ import annotations

import builtins
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sandbox.harness import kernel

LIMIT = 200


def namespace() -> dict[str, Any]:
    return {"__name__": "__main__", "__builtins__": builtins}


@pytest.mark.parametrize(("code", "display", "ename"), [
    ("1 + 1", "2", None),
    ("x = 3", None, None),  # a statement displays nothing
    ("None", None, None),
    ("'a' * 3", "'aaa'", None),
    ("print('p')\n[1, 2]", "[1, 2]", None),
    ("1 / 0", None, "ZeroDivisionError"),
    ("def f(:\n  pass", None, "SyntaxError"),
    ("import sys\nsys.exit(3)", None, "SystemExit"),  # reported, the interpreter stays
    ("raise KeyboardInterrupt", None, "KeyboardInterrupt"),
    ("'x' * 1000", "'" + "x" * (LIMIT - 1) + "... [802 more]", None),
    ("class A:\n  def __repr__(self): raise ValueError\nA()", "<unprintable ValueError>", None),
    ("\0", None, "SyntaxError"),  # a null byte: the parser's error, not the kernel's
])
def test_a_cell_answers_as_a_notebook(code: str, display: str | None,
                                      ename: str | None) -> None:
    got = kernel.run_cell(code, namespace(), 1, LIMIT)
    assert got["display"] == ([] if display is None else [{"text/plain": display}])
    assert [e["ename"] for e in got["error"]] == ([] if ename is None else [ename])


def test_the_namespace_is_kept_and_the_traceback_is_the_cells() -> None:
    ns = namespace()
    kernel.run_cell("def g(v):\n    return 10 // v", ns, 1, LIMIT)
    assert kernel.run_cell("g(5)", ns, 2, LIMIT)["display"] == [{"text/plain": "2"}]
    assert kernel.run_cell("_ * 3", ns, 3, LIMIT)["display"] == [{"text/plain": "6"}]
    kernel.run_cell("y = 1\ng(0)\ny = 2", ns, 4, 10_000)
    assert ns["y"] == 1  # what ran before the exception stays
    error = kernel.run_cell("g(0)", ns, 5, 10_000)["error"][0]
    trace = "".join(error["traceback"])
    assert '"<cell-5>", line 1' in trace and '"<cell-1>", line 2' in trace
    assert "return 10 // v" in trace  # the cell's own source, from linecache
    assert kernel.__file__ not in trace
    assert (error["ename"], error["evalue"]) == ("ZeroDivisionError", "integer division or "
                                                 "modulo by zero")


class Kernel:
    """The kernel as the harness runs it: a subprocess with its two pipes."""

    def __init__(self) -> None:
        cells_r, self.cells = os.pipe()
        self.results, results_w = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-u", kernel.__file__, str(cells_r), str(results_w),
             str(LIMIT)], pass_fds=(cells_r, results_w), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        os.close(cells_r)
        os.close(results_w)
        assert kernel.read_frame(self.results)["ready"] is True

    def send(self, code: str) -> None:
        kernel.write_frame(self.cells, {"code": code})

    def answer(self) -> dict[str, Any]:
        return kernel.read_frame(self.results)

    def close(self) -> None:
        os.close(self.cells)
        self.process.wait(timeout=10)
        os.close(self.results)


@pytest.fixture
def proc() -> Iterator[Kernel]:
    k = Kernel()
    yield k
    if k.process.poll() is None:
        k.close()


def test_an_interrupt_stops_the_cell_and_keeps_the_state(proc: Kernel) -> None:
    proc.send("n = 7")
    assert proc.answer()["error"] == []
    proc.process.send_signal(signal.SIGINT)  # between cells: nothing to stop, nothing dies
    time.sleep(0.2)
    assert proc.process.poll() is None
    proc.send("import time\nwhile True:\n    time.sleep(0.01)")
    time.sleep(0.5)
    proc.process.send_signal(signal.SIGINT)
    assert proc.answer()["error"][0]["ename"] == "KeyboardInterrupt"
    proc.send("n")
    assert proc.answer()["display"] == [{"text/plain": "7"}]


def test_its_pipes_are_not_inherited_and_it_ends_with_them(proc: Kernel) -> None:
    proc.send("import subprocess\nsubprocess.run(['ls', '/proc/self/fd'], "
              "capture_output=True, text=True).stdout.split()")
    fds = eval(proc.answer()["display"][0]["text/plain"])  # noqa: S307 - our own repr
    assert sorted(fds) == ["0", "1", "2", "3"]  # stdio and ls's own listing
    proc.close()
    assert proc.process.returncode == 0


def test_a_child_the_cell_forked_ends_with_the_cell(proc: Kernel) -> None:
    proc.send("import os\nchild = os.fork()\n'child' if child == 0 else 'parent'")
    answer = proc.answer()
    assert answer["display"] == [{"text/plain": "'parent'"}]
    assert answer["pid"] == proc.process.pid
    proc.send("os.waitpid(child, 0)[1]")  # it exited 0 at the cell's end, answering nothing
    assert proc.answer()["display"] == [{"text/plain": "0"}]
    assert not select.select([proc.results], [], [], 0.3)[0]  # no second answer anywhere
