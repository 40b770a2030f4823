"""What runs in a plug-in's check worker (reward_server/pipeline.py): each item's ``check``
in a child process forked for that item alone.

A check is a third party's code reading a completion, which RL optimises against the reward:
whatever the completion makes it do must cost that item a 0 and nothing else. So the check
never runs in the warm worker itself. The worker forks a child per item (a few milliseconds:
the plug-in is imported once, in the worker); the child runs the check with its output
thrown away and every inherited descriptor closed (the pool's channel among them), and
sends back one length-framed message of plain text: the result as JSON, or why there is
none. Then the child is killed. Nothing the check did survives the item: a hoard kept in a
module, a thread left spinning, a patched class, a half-written message. And nothing but
text crosses back: an exception that cannot be rebuilt, a ``SystemExit``, an object whose
unpickling runs code would otherwise reach the pool or the server.

The child is confined further than its worker (``syscall_filters``): it may make threads
but start no process and run no program (a process could outlive the item, or spin on a
CPU another caller's item waits for), it may signal only itself and its group and never
with ``SIGKILL`` (so it cannot end its worker, and a death by ``SIGKILL`` is known to come
from outside), and its CPU time, all threads together, is capped near its time limit.

Outcomes (``run``'s first element): ``ok`` (the result's JSON), ``failed`` (the check raised,
returned something else, died or sent too much: the item's doing), ``memory`` (it ran out
of the worker's memory cap), ``cpu`` (it used its CPU time: threads spinning together) and
``unavailable`` (no child could be started, or it was killed from outside twice: not the
item's doing).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from reward_server import landlock, syscall_filters
from reward_server.libc import PR_SET_PDEATHSIG, last_error, libc, prctl
from reward_server.settings import compose_settings

if TYPE_CHECKING:
    from reward_server.verifiers.base import ItemBase, Verifier

OK, FAILED, MEMORY, CPU, UNAVAILABLE = "ok", "failed", "memory", "cpu", "unavailable"
_KILLED = "killed"  # by SIGKILL from outside (the OOM killer, an operator): run again
RESULT_MAX_BYTES = 1 << 20  # a result's JSON; past it the item fails (a check's result is small)
_TAGS = {b"O": OK, b"F": FAILED, b"M": MEMORY, b"U": UNAVAILABLE}
_EXIT_WAIT_S = 2.0  # for a child whose channel closed to end by itself, before it is killed
_ATTEMPTS = 2  # of a check whose child was killed from outside

_VERIFIER: Any = None  # this worker's instance of the verifier whose checks it runs


def load(cls: type[Verifier], sections: dict[str, type[BaseModel]],
         settings: dict[str, Any]) -> None:
    """The worker's instance, with the settings as the server has them (rebuilt from JSON:
    the composed class is made at run time and cannot be pickled)."""
    global _VERIFIER
    _VERIFIER = cls(compose_settings(sections).model_validate(settings))


def run(item: ItemBase, cpu_limit_s: int) -> tuple[str, str]:
    """``check(item)`` in a child of its own, with at most ``cpu_limit_s`` seconds of CPU
    time: (outcome, the result's JSON or why not)."""
    for _ in range(_ATTEMPTS):
        outcome, detail = _run_once(item, cpu_limit_s)
        if outcome != _KILLED:
            return outcome, detail
    return UNAVAILABLE, f"not scored: {detail}, {_ATTEMPTS} times running this item"


def _run_once(item: ItemBase, cpu_limit_s: int) -> tuple[str, str]:
    shared = _shared_mappings()  # read here: the child may not read /proc
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        return UNAVAILABLE, f"no process could be started for the check: {exc}"
    if pid == 0:  # pragma: no cover - the child; it never returns
        _child(item, write_fd, cpu_limit_s, shared)
    os.close(write_fd)
    ended = None
    try:
        header = _read_exactly(read_fd, 4)
        size = int.from_bytes(header, "big") if len(header) == 4 else 0
        sent = _read_exactly(read_fd, size) if size <= RESULT_MAX_BYTES + 1 else b""
        if not sent:
            ended = _ended_by_itself(pid)
    finally:  # the soft time limit lands here too, as an exception while reading
        os.close(read_fd)
        # the clean-up is never cut short by the soft limit: its alarm waits until it is done
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            cpu_s = _end(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if size > RESULT_MAX_BYTES + 1:
        return FAILED, f"the check's result is over {RESULT_MAX_BYTES} bytes"
    outcome = _TAGS.get(sent[:1])
    if outcome is not None:
        return outcome, sent[1:].decode("utf-8", "replace")
    return _death(ended, cpu_s, cpu_limit_s)


def _death(ended: Any, cpu_s: float, cpu_limit_s: int) -> tuple[str, str]:
    """What a child that sent nothing died of (``ended``: its ``waitid`` record, ``None``
    where it was still running with its channel closed)."""
    if ended is None:
        return FAILED, "the check closed its channel to the worker"
    if ended.si_code == os.CLD_EXITED:
        return FAILED, f"the check's process exited ({ended.si_status}) before it sent a result"
    if ended.si_status == signal.SIGXCPU or cpu_s >= cpu_limit_s:
        return CPU, f"used its {cpu_limit_s} s of CPU time (threads together)"
    if ended.si_status == signal.SIGKILL:  # the child cannot send itself one
        return _KILLED, "the check's process was killed from outside"
    return FAILED, f"the check's process died of signal {ended.si_status}"


def _ended_by_itself(pid: int) -> Any:
    """The child's exit record once it has ended (left unreaped), or ``None`` where it is
    still running ``_EXIT_WAIT_S`` after its channel closed."""
    deadline = time.monotonic() + _EXIT_WAIT_S
    while True:
        ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if ended is not None or time.monotonic() > deadline:
            return ended
        time.sleep(0.005)


def _child(item: ItemBase, write_fd: int, cpu_limit_s: int,
           shared: list[tuple[int, int]]) -> None:
    """Confine this process, run the check, send one tagged message, exit; whatever it
    raised or left."""
    message = b"F" + b"the check did not finish"
    try:
        try:
            os.setpgid(0, 0)  # its threads' signals stay in its own group
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # gone with the worker, if that is killed
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # a flood of prints reaches no log, and fills no file
                os.dup2(null, fd)
            os.closerange(3, write_fd)  # the pool's channel: no task of another caller's
            os.closerange(write_fd + 1, os.sysconf("SC_OPEN_MAX"))
            _unmap(shared)  # the pool's locks: a check holding one would stall every task
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit_s, cpu_limit_s + 1))
            why_not = landlock.deny_writes()  # the worker's own directory is not the item's
            if why_not is not None and landlock.abi() > 0:
                raise OSError(why_not)
            me = os.getpid()
            syscall_filters.install(syscall_filters.CHECK_DENIED,
                                    signal_targets=[me, -me, 0], threads_only=True)
        except BaseException as exc:  # noqa: BLE001 - no confinement, no check
            message = b"U" + f"the check could not be confined: {_describe(exc)}".encode()
        else:
            message = _checked(item)
        view = memoryview(len(message).to_bytes(4, "big") + message[:RESULT_MAX_BYTES + 2])
        if len(message) > RESULT_MAX_BYTES + 1:
            view = view[:4]  # its size alone: read as too long
        while view:
            view = view[os.write(write_fd, view):]
    except BaseException:  # noqa: BLE001, S110 - nothing of the child's may reach the worker
        pass
    finally:
        os._exit(0)


def _checked(item: ItemBase) -> bytes:
    """The check's verdict as a tagged message."""
    try:
        result = _VERIFIER.check(item)
        if type(result) is not _VERIFIER.result_model:
            return b"F" + (f"check returned {type(result).__name__}, not "
                           f"{_VERIFIER.result_model.__name__}").encode()
        return b"O" + result.model_dump_json().encode()
    except MemoryError:
        return b"M" + b"exceeded the worker memory cap"
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: the item's doing
        return b"F" + _describe(exc).encode("utf-8", "replace")

def _describe(exc: BaseException) -> str:
    """The exception's type and text, whatever its ``__str__`` does."""
    name = type(exc).__name__
    try:
        return f"{name}: {exc}"[:300]
    except BaseException:  # noqa: BLE001 - a __str__ that raises says nothing more
        return name[:300]


def _read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes, or fewer where the writer ended first (b"" for none)."""
    chunks, got = [], 0
    while got < size:
        chunk = os.read(fd, min(65536, size - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _end(pid: int) -> float:
    """Kill the child's group and reap the child: the CPU seconds it used, threads included."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):  # before it made its group too
        try:
            kill(target, signal.SIGKILL)
        except OSError:
            pass
    try:
        _, _, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return 0.0
    return usage.ru_utime + usage.ru_stime


def _shared_mappings() -> list[tuple[int, int]]:
    """The worker's shared memory mappings, (start, length): the pool's semaphores among
    them, which a child inherits and could take or corrupt."""
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perms = line.split(maxsplit=2)[:2]
            if perms.endswith("s"):
                start, end = (int(x, 16) for x in span.split("-"))
                found.append((start, end - start))
    return found


def _unmap(shared: list[tuple[int, int]]) -> None:
    for start, length in shared:
        if libc().munmap(ctypes.c_void_p(start), ctypes.c_size_t(length)) != 0:
            raise OSError(ctypes.get_errno(), f"munmap of a shared mapping: {last_error()}")

