"""What runs in a plug-in's check worker (reward_server/pipeline.py): each item's ``check``
in a child process made for that item alone.

A check is a third party's code reading a completion, which RL optimises against the reward:
whatever the completion makes it do must cost that item a 0 and nothing else. So the check
never runs in the warm worker itself. Each item's child is forked from a **zygote**: a copy
of the worker made when it loaded the plug-in, before any item reached it, which does
nothing but fork children (a few milliseconds: the plug-in is imported once). A child
forked from the worker itself would inherit its heap, and with it earlier items of any
caller, freed but not erased, for a check to read out of its own memory. The zygote hands
the worker the child's two pipes and never reads an item itself.

The child is confined before it reads its item (``syscall_filters``, ``landlock``): every
inherited descriptor closed, its output thrown away, the worker's shared memory (the pool's
locks) unmapped; it may start no process or thread and run no program (each would take a
CPU from other callers' items beyond its share, or outlive the item), write no file, make no
memfd (memory its cap does not count), signal only itself and never with ``SIGKILL`` (so it
cannot end its worker, and a death by ``SIGKILL`` is known to come from outside), and use
about its time limit in CPU time. Only once confined does it tell the zygote so, on a pipe
it then closes: the check never holds a way to say anything but its result.

It sends back one length-framed message of plain text: the result as JSON, or why there is
none. Then it is killed. Nothing the check did survives the item: a hoard kept in a module,
a patched class, a half-written message. And nothing but text crosses back: an exception
that cannot be rebuilt, a ``SystemExit``, an object whose unpickling runs code would
otherwise reach the pool or the server.

Outcomes (``run``'s first element): ``ok`` (the result's JSON), ``failed`` (the check raised,
returned something else, died or sent too much: the item's doing), ``memory`` (it ran out
of the worker's memory cap), ``cpu`` (it used its CPU time) and ``unavailable`` (no child
could be started or confined, or it was killed from outside twice: not the item's doing).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import resource
import select
import signal
import socket
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel

from reward_server import landlock, syscall_filters, worker_isolation
from reward_server.libc import PR_SET_NAME, PR_SET_PDEATHSIG, last_error, libc, prctl
from reward_server.process_pool import charge_cpu, soft_limit_held
from reward_server.process_pool import soft_limit_left as _remaining
from reward_server.settings import compose_settings

if TYPE_CHECKING:
    from reward_server.verifiers.base import ItemBase, Verifier

OK, FAILED, MEMORY, CPU, UNAVAILABLE = "ok", "failed", "memory", "cpu", "unavailable"
_KILLED = "killed"  # by SIGKILL from outside (the OOM killer, an operator): run again
RESULT_MAX_BYTES = 64 << 10  # a result's JSON; past it the item fails (a result is small)
_TAGS = {b"O": OK, b"F": FAILED, b"M": MEMORY}  # what a child may say: never "unavailable"
_EXIT_WAIT_S = 2.0  # for a child whose channel closed to end by itself, before it is killed
_ATTEMPTS = 2  # of a check whose child was killed from outside
# for a child to be confined (milliseconds as a rule): one that is not by then is stuck (a
# lock some other thread of the worker held when the zygote was forked) and is killed, so
# its item is unavailable rather than its worker waiting for ever
_CONFINED_WITHIN_S = 30.0
_MAX_FILES = 64  # descriptors a check may hold
_EXIT = struct.Struct("=id")  # a child's wait status and CPU seconds, from the zygote
ZYGOTE_NAME, CHILD_NAME = b"check-zygote", b"check-item"  # in ps/top, for an operator

_VERIFIER: Any = None  # this worker's instance of the verifier whose checks it runs
_ZYGOTE: socket.socket | None = None  # the worker's end of its zygote's channel


def load(cls: type[Verifier], sections: dict[str, type[BaseModel]],
         settings: dict[str, Any]) -> None:
    """The worker's instance, with the settings as the server has them (rebuilt from JSON:
    the composed class is made at run time and cannot be pickled), and its zygote, made
    now, before any item."""
    global _VERIFIER, _ZYGOTE
    _VERIFIER = cls(compose_settings(sections).model_validate(settings))
    _ZYGOTE = start_zygote()


def run(item: ItemBase, cpu_limit_s: int) -> tuple[str, str]:
    """``check(item)`` in a child of its own, with at most ``cpu_limit_s`` seconds of CPU
    time: (outcome, the result's JSON or why not)."""
    for _ in range(_ATTEMPTS):
        outcome, detail = _run_once(item, cpu_limit_s)
        if outcome != _KILLED:
            return outcome, detail
    return UNAVAILABLE, f"not scored: {detail}, {_ATTEMPTS} times running this item"


class _Exit(NamedTuple):
    status: int  # as ``os.wait4`` gives it
    cpu_s: float
    by_itself: bool  # ended before the worker killed it


def _run_once(item: ItemBase, cpu_limit_s: int) -> tuple[str, str]:
    """One child's run. The soft time limit is held back throughout and its deadline
    waited for explicitly (``_remaining``): a timeout raised between two steps of the
    hand-over left the zygote's record of this child unread, or its pipes open, and the
    next item, any caller's, read that record as its own reply or waited for ever. Once the
    child is killed and reaped, a limit that came due meanwhile raises the timeout."""
    with soft_limit_held():
        return _run_held(item, cpu_limit_s)


def _run_held(item: ItemBase, cpu_limit_s: int) -> tuple[str, str]:
    zygote = _ZYGOTE
    assert zygote is not None, "check_worker.load makes the zygote"
    try:
        zygote.send(str(cpu_limit_s).encode())
        reply, fds, _, _ = socket.recv_fds(zygote, 1024, 2)
    except OSError:
        reply, fds = b"", []
    if not reply:
        _zygote_lost()
    if reply[:1] == b"E":
        return UNAVAILABLE, reply[1:].decode("utf-8", "replace")
    pid, (item_w, result_r) = int(reply[1:]), fds
    ended: _Exit | None = None
    sent, size = b"", 0
    try:
        try:
            _send(item_w, _framed(pickle.dumps(item)))
        except BrokenPipeError:  # it ended before it read its item: why, below
            pass
        finally:
            os.close(item_w)
        header = _read_exactly(result_r, 4, _ready)
        size = int.from_bytes(header, "big") if len(header) == 4 else 0
        sent = _read_exactly(result_r, size, _ready) if size <= RESULT_MAX_BYTES + 1 else b""
        left = _remaining()
        if not sent and left != 0.0:
            ended = _exit_of(zygote, by_itself=True,
                             wait_s=_EXIT_WAIT_S if left is None else min(_EXIT_WAIT_S, left))
    finally:
        os.close(result_r)
        if ended is None:
            ended = _end(zygote, pid)
        charge_cpu(ended.cpu_s)  # the child's CPU time is the task's, not the zygote's
    if size > RESULT_MAX_BYTES + 1:
        return FAILED, f"the check's result is over {RESULT_MAX_BYTES} bytes"
    if sent:
        outcome = _TAGS.get(sent[:1])
        if outcome is None:
            return FAILED, "the check's process sent something other than a result"
        return outcome, sent[1:].decode("utf-8", "replace")
    return _death(ended, cpu_limit_s)


def _ready(fd: int, writing: bool = False, until: float | None = None) -> bool:
    """Whether ``fd`` is ready before ``until`` (a ``time.monotonic`` time) where given,
    else before the soft time limit is due."""
    left = _remaining() if until is None else max(0.0, until - time.monotonic())
    if left == 0.0:
        return False
    ready = select.select([] if writing else [fd], [fd] if writing else [], [], left)
    return bool(ready[0] or ready[1])


def _send(fd: int, data: bytes) -> None:
    """All of ``data``, or as much as the child read before the time limit was due."""
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view and _ready(fd, writing=True):
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            continue


def _death(ended: _Exit, cpu_limit_s: int) -> tuple[str, str]:
    """What a child that sent nothing died of."""
    if not ended.by_itself:
        return FAILED, "the check closed its channel to the worker"
    if os.WIFEXITED(ended.status):
        return FAILED, (f"the check's process exited ({os.WEXITSTATUS(ended.status)}) "
                        "before it sent a result")
    signum = os.WTERMSIG(ended.status)
    if signum == signal.SIGXCPU or ended.cpu_s >= cpu_limit_s:
        return CPU, f"used its {cpu_limit_s} s of CPU time"
    if signum == signal.SIGKILL:  # the child cannot send itself one
        return _KILLED, "the check's process was killed from outside"
    return FAILED, f"the check's process died of signal {signum}"


def _end(zygote: socket.socket, pid: int) -> _Exit:
    """The child killed, unless the zygote has already reaped it (its pid could be another
    process's by now), and its exit record."""
    ended = _exit_of(zygote, by_itself=True, wait_s=0)
    if ended is not None:
        return ended
    try:
        os.kill(pid, signal.SIGKILL)  # not reaped yet: still the child, or its zombie
    except OSError:
        pass
    ended = _exit_of(zygote, by_itself=False, wait_s=None)
    if ended is None:
        _zygote_lost()
    return ended


def _exit_of(zygote: socket.socket, by_itself: bool, wait_s: float | None) -> _Exit | None:
    """The zygote's record of the child's end, once it has one (``wait_s`` None: wait for
    it); ``None`` where there is none yet."""
    if wait_s is not None and not select.select([zygote], [], [], wait_s)[0]:
        return None
    record = zygote.recv(64)
    if len(record) != 1 + _EXIT.size or record[:1] != b"X":
        _zygote_lost()
    status, cpu_s = _EXIT.unpack(record[1:])
    return _Exit(status, cpu_s, by_itself)


def _zygote_lost() -> None:
    """Without its zygote the worker has no clean way to run a check (a new one forked now
    would carry the items this worker has seen): it ends itself as if killed from outside,
    which the pool answers by running the item again on a fresh worker."""
    os.kill(os.getpid(), signal.SIGKILL)


def start_zygote() -> socket.socket:
    """Fork the zygote from this process as it is now; the worker's end of its channel."""
    shared = _shared_mappings()  # read here: the zygote may not read /proc
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the zygote; it never returns
        try:
            ours.close()
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # gone with the worker
            prctl(PR_SET_NAME, ZYGOTE_NAME)
            _keep_only(theirs.fileno())  # the pool's channel among what it closes
            _unmap(shared)  # the pool's locks: no child of it may take one
            _serve(theirs)
        finally:
            os._exit(0)
    theirs.close()
    return ours


def _serve(channel: socket.socket) -> None:
    """The zygote's loop: a child per request, until the worker is gone."""
    while True:
        request = channel.recv(64)
        if not request:
            return
        _spawn(channel, int(request))


def _spawn(channel: socket.socket, cpu_limit_s: int) -> None:
    """Fork a child, wait for it to be confined, hand the worker its pipes, reap it and
    send the worker how it ended."""
    item_r, item_w = os.pipe()
    result_r, result_w = os.pipe()
    ready_r, ready_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in (item_r, item_w, result_r, result_w, ready_r, ready_w):
            os.close(fd)
        channel.send(b"E" + f"no process could be started for the check: {exc}".encode())
        return
    if pid == 0:  # pragma: no cover - the child; it never returns
        _child(item_r, result_w, ready_w, cpu_limit_s)
    for fd in (item_r, result_w, ready_w):
        os.close(fd)
    until = time.monotonic() + _CONFINED_WITHIN_S
    ready = _read_exactly(ready_r, 512, lambda fd: _ready(fd, until=until))
    os.close(ready_r)
    if ready == b"R":
        socket.send_fds(channel, [b"P%d" % pid], [item_w, result_r])
    os.close(item_w)
    os.close(result_r)
    if ready != b"R":  # it could not be confined, and said why (or died first)
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    if ready != b"R":
        why = ready[1:] or (b"the check's process was not confined within %d s"
                            % _CONFINED_WITHIN_S if time.monotonic() >= until
                            else b"the check's process ended before it was confined")
        channel.send(b"E" + why)
        return
    channel.send(b"X" + _EXIT.pack(status, usage.ru_utime + usage.ru_stime))


def _child(item_r: int, result_w: int, ready_w: int, cpu_limit_s: int) -> None:
    """Confine this process, say so, read the item, run the check, send one tagged
    message, exit; whatever it raised or left."""
    try:
        try:
            _confine(cpu_limit_s, keep=(item_r, result_w, ready_w))
        except BaseException as exc:  # noqa: BLE001 - no confinement, no check
            os.write(ready_w, b"U" + _describe(exc).encode("utf-8", "replace"))
            return
        os.write(ready_w, b"R")
        os.close(ready_w)  # the check cannot claim it was not confined
        item = pickle.loads(_read_exactly(item_r, int.from_bytes(_read_exactly(item_r, 4),
                                                                  "big")))
        os.close(item_r)
        message = _checked(item)
        view = memoryview(len(message).to_bytes(4, "big") + message[:RESULT_MAX_BYTES + 2])
        if len(message) > RESULT_MAX_BYTES + 1:
            view = view[:4]  # its size alone: read as too long
        _write_all(result_w, view)
    except BaseException:  # noqa: BLE001, S110 - nothing of the child's may reach the worker
        pass
    finally:
        os._exit(0)


def _confine(cpu_limit_s: int, keep: tuple[int, ...]) -> None:
    os.setpgid(0, 0)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # gone with the zygote, and so the worker
    prctl(PR_SET_NAME, CHILD_NAME)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # a flood of prints reaches no log, and fills no file
        os.dup2(null, fd)
    _keep_only(*keep)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit_s, cpu_limit_s + 1))
    # every descriptor holds kernel memory its address-space cap does not count (a pipe's,
    # an epoll's): a few dozen are all a check needs
    resource.setrlimit(resource.RLIMIT_NOFILE, (_MAX_FILES, _MAX_FILES))
    # neither the worker's directory (not the item's to write) nor its /proc entry (its
    # command line, the host's connections under a non-root server)
    readable = worker_isolation.confined_to()
    why_not = (landlock.deny_writes() if readable is None
               else landlock.restrict(readable, ["/dev/null"]))
    if why_not is not None and landlock.abi() > 0:
        raise OSError(why_not)
    me = os.getpid()
    # the worker's own rules again, so the child holds them whatever process forked it
    syscall_filters.install(syscall_filters.WORKER_DENIED + syscall_filters.CHECK_DENIED,
                            signal_targets=[me, -me, 0], freeze_limits=True,
                            own_process_only=True)


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


def _framed(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int, ready: Callable[[int], bool] | None = None) -> bytes:
    """``size`` bytes, or fewer where the writer ended first (b"" for none) or ``ready``
    said no more will come in time (a deadline passed)."""
    chunks, got = [], 0
    while got < size and (ready is None or ready(fd)):
        chunk = os.read(fd, min(65536, size - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _keep_only(*fds: int) -> None:
    """Close every descriptor but stdio and ``fds``."""
    start = 3
    for fd in sorted(fds):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))


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
