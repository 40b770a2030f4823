"""A plug-in check's child process (reward_server/check_worker.py) as a unit, run from the
test's own process as a worker would: what each way a child can end is reported as. No soft
time limit runs here, so a verdict that depends on CPU time cannot be a wall-clock one."""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from reward_server import check_worker
from tests.helpers.hostile_plugin import HostileItem, HostileResult, hash_forever

pytestmark = pytest.mark.slow  # processes forked and killed


class _Checks:
    result_model = HostileResult

    def __init__(self, check: Callable[[], HostileResult]) -> None:
        self.check = lambda item: check()


@pytest.fixture
def checking() -> Iterator[Callable[[Callable[[], HostileResult]], tuple[str, str]]]:
    def run(check: Callable[[], HostileResult]) -> tuple[str, str]:
        check_worker._VERIFIER = _Checks(check)
        return check_worker.run(HostileItem(response="x"), 1)

    yield run
    check_worker._VERIFIER = None


def _threads_hashing() -> HostileResult:
    for _ in range(3):
        threading.Thread(target=hash_forever, daemon=True).start()
    hash_forever()
    raise AssertionError("unreachable")


def test_threads_that_spin_together_end_at_the_cpu_limit(checking) -> None:
    started = time.process_time()
    outcome, detail = checking(_threads_hashing)
    assert (outcome, detail) == ("cpu", "used its 1 s of CPU time (threads together)")
    assert time.process_time() - started < 1  # the child's time, not the worker's


def _named_sleeper() -> HostileResult:
    ctypes.CDLL(None).prctl(15, b"victim-check", 0, 0, 0)  # PR_SET_NAME
    time.sleep(60)
    raise AssertionError("unreachable")


def _kill_victims(stop: threading.Event, killed: list[int]) -> None:
    while not stop.is_set():
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] == "victim-check" and proc.pid not in killed:
                os.kill(proc.pid, signal.SIGKILL)
                killed.append(proc.pid)
        time.sleep(0.02)


def test_a_child_killed_from_outside_runs_again_then_is_unavailable(checking) -> None:
    """SIGKILL is what the OOM killer or an operator sends, never the check itself (refused
    by its filter): run again, and left unscored (null) past the second time."""
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_victims, args=(stop, killed))
    killer.start()
    try:
        outcome, detail = checking(_named_sleeper)
    finally:
        stop.set()
        killer.join()
    assert len(killed) == 2
    assert outcome == "unavailable" and "killed from outside" in detail, detail


def _sigkill_self() -> HostileResult:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def _close_channel_and_wait() -> HostileResult:
    os.closerange(3, 1024)
    time.sleep(60)
    raise AssertionError("unreachable")


def _abort() -> HostileResult:
    os.abort()


@pytest.mark.parametrize(("check", "expected"), [
    (_sigkill_self, ("failed", "PermissionError: [Errno 1] Operation not permitted")),
    (_close_channel_and_wait, ("failed", "the check closed its channel to the worker")),
    (_abort, ("failed", "the check's process died of signal 6")),
    (lambda: os._exit(3), ("failed", "the check's process exited (3) before it sent a result")),
])
def test_how_a_child_ended_is_the_items_doing(checking, check, expected) -> None:
    assert checking(check) == expected


def test_the_workers_shared_memory_is_gone_from_the_child(checking) -> None:
    """The pool's locks live in memory the worker shares with the server's side: a child
    writing where one of them lies dies (SIGSEGV), and the worker's copy is untouched."""
    shared = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)
    address = ctypes.addressof(ctypes.c_char.from_buffer(shared))

    def clobber() -> HostileResult:
        ctypes.memset(address, 0x41, 4096)
        return HostileResult(score=1.0, status="ok")

    assert checking(clobber) == ("failed", "the check's process died of signal 11")
    assert shared[:4096] == bytes(4096)
