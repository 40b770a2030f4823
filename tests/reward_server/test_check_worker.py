"""A plug-in check's child process (reward_server/check_worker.py) as a unit, run from the
test's own process as a worker would, through a zygote of its own: what each way a child can
end is reported as, and what a check cannot reach. No soft time limit runs here, so a verdict
that depends on CPU time cannot be a wall-clock one."""

from __future__ import annotations

import ctypes
import mmap
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from reward_server import check_worker, process_pool
from tests.conftest import ROOT
from tests.helpers.hostile_plugin import HostileItem, HostileResult, _forge
from tests.helpers.zygote_sweep import Checks

pytestmark = pytest.mark.slow  # processes forked and killed

Check = Callable[[HostileItem], HostileResult]


@pytest.fixture
def zygote() -> Iterator[Callable[[Check], None]]:
    """``start(check)``: a zygote forked now, whose children run ``check``."""
    def start(check: Check) -> None:
        check_worker._VERIFIER = Checks(check)
        check_worker._ZYGOTE = check_worker.start_zygote()

    yield start
    if check_worker._ZYGOTE is not None:
        check_worker._ZYGOTE.close()  # the zygote ends when its channel does
    check_worker._VERIFIER = check_worker._ZYGOTE = None


_GUARD_S = 120  # a soft time limit, as in a worker: no test waits on a stuck child for ever


def run(response: str = "x", cpu_limit_s: int = 1) -> tuple[str, str]:
    """The item through ``check_worker.run`` as a worker runs it, under a soft limit."""
    _, _, fired, value, _ = process_pool._timed(check_worker.run, _GUARD_S,
                                                HostileItem(response=response), cpu_limit_s)
    assert not fired, f"the check was still running after {_GUARD_S} s"
    return value


def _spin(item: HostileItem) -> HostileResult:
    while True:
        pass


def test_a_check_ends_at_its_cpu_limit(zygote) -> None:
    zygote(_spin)
    started = time.process_time()
    assert run() == ("cpu", "used its 1 s of CPU time")
    assert time.process_time() - started < 1  # the child's time, not the worker's


def _named_sleeper(item: HostileItem) -> HostileResult:
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


def test_a_child_killed_from_outside_runs_again_then_is_unavailable(zygote) -> None:
    """SIGKILL is what the OOM killer or an operator sends, never the check itself (refused
    by its filter): run again, and left unscored (null) past the second time."""
    zygote(_named_sleeper)
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_victims, args=(stop, killed))
    killer.start()
    try:
        outcome, detail = run()
    finally:
        stop.set()
        killer.join()
    assert len(killed) == 2
    assert outcome == "unavailable" and "killed from outside" in detail, detail


def _sigkill_self(item: HostileItem) -> HostileResult:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def _close_channel_and_wait(item: HostileItem) -> HostileResult:
    os.closerange(3, 1024)
    time.sleep(60)
    raise AssertionError("unreachable")


def _forge_unavailable(item: HostileItem) -> HostileResult:
    """What the third audit sent: 'not scored', framed, on every descriptor it holds."""
    return _forge(b"Unot scored: forged")


def _memfd(item: HostileItem) -> HostileResult:
    os.memfd_create("beyond-the-cap")  # pages no address-space limit counts
    raise AssertionError("unreachable")


def _thread(item: HostileItem) -> HostileResult:
    threading.Thread(target=time.sleep, args=(1,)).start()
    raise AssertionError("unreachable")


def _abort(item: HostileItem) -> HostileResult:
    os.abort()


@pytest.mark.parametrize(("check", "expected"), [
    (_sigkill_self, ("failed", "PermissionError: [Errno 1] Operation not permitted")),
    (_close_channel_and_wait, ("failed", "the check closed its channel to the worker")),
    (_forge_unavailable, ("failed", "the check's process sent something other than a result")),
    (_memfd, ("failed", "PermissionError: [Errno 1] Operation not permitted")),
    (_thread, ("failed", "RuntimeError: can't start new thread")),
    (_abort, ("failed", "the check's process died of signal 6")),
    (lambda item: os._exit(3),
     ("failed", "the check's process exited (3) before it sent a result")),
])
def test_how_a_child_ended_is_the_items_doing(zygote, check, expected) -> None:
    zygote(check)
    assert run() == expected


def test_a_child_stuck_before_it_is_confined_is_unavailable_not_a_hang(
        zygote, monkeypatch) -> None:
    """A child forked while another thread of the worker held a lock (a plug-in's import
    may start threads) can block for ever before it is confined: the zygote gives it a
    bound, so its item is unavailable and the worker goes on."""
    monkeypatch.setattr(check_worker, "_confine", lambda *args, **kwargs: time.sleep(3600))
    monkeypatch.setattr(check_worker, "_CONFINED_WITHIN_S", 1.0)
    zygote(lambda item: HostileResult(score=1.0, status="ok"))
    assert run() == ("unavailable", "the check's process was not confined within 1 s")


def test_the_workers_shared_memory_is_gone_from_the_child(zygote) -> None:
    """The pool's locks live in memory the worker shares with the server's side: a child
    writing where one of them lies dies (SIGSEGV), and the worker's copy is untouched."""
    shared = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)
    address = ctypes.addressof(ctypes.c_char.from_buffer(shared))

    def clobber(item: HostileItem) -> HostileResult:
        ctypes.memset(address, 0x41, 4096)
        return HostileResult(score=1.0, status="ok")

    zygote(clobber)
    assert run() == ("failed", "the check's process died of signal 11")
    assert shared[:4096] == bytes(4096)


def _refused(probe: Callable[[int], object], pid: int) -> bool:
    try:
        probe(pid)
    except PermissionError:
        return True
    return False


def _capget(pid: int) -> None:
    """Its capabilities (or ESRCH: no such process), refused even of itself."""
    header = (ctypes.c_uint32 * 2)(0x20080522, pid)  # _LINUX_CAPABILITY_VERSION_3
    data = (ctypes.c_uint32 * 6)()
    if ctypes.CDLL(None, use_errno=True).capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")


def _probe_the_zygote(item: HostileItem) -> HostileResult:
    """What the kernel tells any process of any pid, asked of the zygote (and so, of the
    server) and of this process itself."""
    other, me = os.getppid(), os.getpid()
    probes = {
        "getpgid": lambda pid: os.getpgid(pid), "getsid": lambda pid: os.getsid(pid),
        "getpriority": lambda pid: os.getpriority(os.PRIO_PROCESS, pid),
        "sched_getaffinity": lambda pid: os.sched_getaffinity(pid),
        "sched_getscheduler": lambda pid: os.sched_getscheduler(pid),
        "cpu clock": lambda pid: time.clock_gettime(((~pid) << 3) | 2),  # CPUCLOCK_SCHED
        "capget": _capget,
    }
    refused = sorted(name for name, probe in probes.items() if _refused(probe, other))
    own = sorted(name for name, probe in probes.items()
                 if not _refused(probe, me) and not _refused(probe, 0))
    return HostileResult(score=1.0, status="ok", info=f"{refused}/{own}/{time.process_time()}")


def test_a_check_learns_nothing_of_another_process_by_its_pid(zygote) -> None:
    """Another process's group, session, priority, scheduling and CPU time are the kernel's
    to tell any caller: a check is told its own alone (its CPU clock and timers work)."""
    zygote(_probe_the_zygote)
    outcome, detail = run()
    names = ["capget", "cpu clock", "getpgid", "getpriority", "getsid", "sched_getaffinity",
             "sched_getscheduler"]
    own = [name for name in names if name != "capget"]  # capget: refused outright
    assert outcome == "ok" and f'"info":"{names}/{own}/' in detail, detail


def _heap_ranges() -> list[tuple[int, int]]:
    """This process's private writable anonymous memory: where the items it unpickled were
    (the larger mappings, model weights and the like, left out)."""
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            anonymous = len(fields) < 6 or fields[5] == "[heap]"
            if fields[1] == "rw-p" and anonymous and end - start <= 64 << 20:
                found.append((start, end - start))
    return found


def _holds(masked: int, ranges: list[tuple[int, int]]) -> bool:
    """Whether the needle is in this process's memory at ``ranges``, read page by page
    through a pipe (a page that is not mapped here fails the write, not the process). The
    needle is given XOR-masked with ``_MASK``, and each page is masked before the search, so
    the needle itself is never in the memory searched."""
    needle = masked.to_bytes(_LENGTH, "big")
    read_fd, write_fd = os.pipe()
    try:
        for start, length in ranges:
            for page in range(start, start + length, 4096):
                try:
                    os.write(write_fd, (ctypes.c_char * 4096).from_address(page))
                except OSError:
                    continue
                if needle in _masked_page(os.read(read_fd, 4096)):
                    return True
    finally:
        os.close(read_fd)
        os.close(write_fd)
    return False


_LENGTH = 24  # "BSECRET-" and 16 hex digits
_BYTE_MASK = 0x5A


def _masked_page(page: bytes) -> bytes:
    return (int.from_bytes(page, "big") ^ int.from_bytes(bytes([_BYTE_MASK]) * len(page),
                                                         "big")).to_bytes(len(page), "big")


def _answer_or_scan(item: HostileItem) -> HostileResult:
    if item.response.startswith("scan "):
        masked, ranges = item.response[5:].split(" ", 1)
        found = _holds(int(masked), [tuple(map(int, r.split(":"))) for r in ranges.split(",")])
        return HostileResult(score=0.0, status="ok", info=f"found={found}")
    return HostileResult(score=1.0, status="ok")


def test_a_check_cannot_read_an_earlier_callers_item_from_its_memory(zygote) -> None:
    """The third audit read another caller's answer out of the memory its child inherited
    from the worker, which held the earlier item. The child, forked from the zygote (the
    worker before any item), holds nothing of it."""
    zygote(_answer_or_scan)
    secret = "BSECRET-" + secrets.token_hex(8)  # made after the zygote: only items carry it
    assert run(f"reasoning about {secret}")[0] == "ok"
    spans = ",".join(f"{start}:{length}" for start, length in _heap_ranges())
    masked = int.from_bytes(_masked_page(secret.encode()), "big")
    scanned = run(f"scan {masked} {spans}", cpu_limit_s=60)
    assert scanned[0] == "ok" and '"info":"found=False"' in scanned[1], scanned


def _sweep(*args: str) -> None:
    """tests/helpers/zygote_sweep.py in a process of its own, as a worker forks its zygote."""
    out = subprocess.run([sys.executable, "-m", "tests.helpers.zygote_sweep", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_soft_time_limit_anywhere_in_the_hand_over_leaves_the_next_item_in_step() -> None:
    """The sixth audit's race: the soft limit's alarm landing between two steps of the
    hand-over left the zygote's record of the child unread, and the next item read it as
    its reply (0, ``crashed``). Alarms at 400 points from the fork to the result: every
    next item is answered as its own."""
    _sweep()


def test_the_soft_limit_is_held_back_when_another_thread_takes_the_alarm() -> None:
    """A worker with a thread of its own (a plug-in's import may start one): the kernel
    gives the alarm to whichever thread does not block it, and Python raises the timeout
    on the main thread regardless of its signal mask. Held back at the Python level, the
    hand-over is never cut in two (before, its child's pipes stayed open, the zygote
    waited on the child, the child on its item and the next item for ever)."""
    _sweep("--bystander")
