"""What runs in a plug-in's check worker (reward_server/pipeline.py): each item's ``check``
in a child process forked for that item alone.

A check is a third party's code reading a completion, which RL optimises against the reward:
whatever the completion makes it do must cost that item a 0 and nothing else. So the check
never runs in the warm worker itself. The worker forks a child per item (a few milliseconds:
the plug-in is imported once, in the worker); the child runs the check with its output
thrown away and every inherited descriptor closed (the pool's channel among them), and
sends back one line of plain text: the result as JSON, or why there is none. Then the
child, its process group and anything it left behind are killed. Nothing the check
did survives the item: a hoard kept in a module, a thread left spinning, a patched class,
a forked process, a half-written message. And nothing but text crosses back: an exception
that cannot be rebuilt, a ``SystemExit``, an object whose unpickling runs code would
otherwise reach the pool or the server.

Outcomes (``run``'s first element): ``ok`` (the result's JSON), ``failed`` (the check raised,
returned something else, died or sent too much: the item's doing), ``memory`` (it ran out
of the worker's memory cap) and ``unavailable`` (no child could be started: not the item's
doing).
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from reward_server.settings import compose_settings

if TYPE_CHECKING:
    from reward_server.verifiers.base import ItemBase, Verifier

OK, FAILED, MEMORY, UNAVAILABLE = "ok", "failed", "memory", "unavailable"
RESULT_MAX_BYTES = 1 << 20  # a result's JSON; past it the item fails (a check's result is small)
_TAGS = {b"O": OK, b"F": FAILED, b"M": MEMORY}
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_MAX_ROUNDS = 64  # of killing what a check left behind, each round a generation of orphans

_VERIFIER: Any = None  # this worker's instance of the verifier whose checks it runs


def load(cls: type[Verifier], sections: dict[str, type[BaseModel]],
         settings: dict[str, Any]) -> None:
    """The worker's instance, with the settings as the server has them (rebuilt from JSON:
    the composed class is made at run time and cannot be pickled). The worker becomes a
    subreaper, so what a check's processes leave orphaned comes back to it to be killed."""
    global _VERIFIER
    _VERIFIER = cls(compose_settings(sections).model_validate(settings))
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def run(item: ItemBase) -> tuple[str, str]:
    """``check(item)`` in a child of its own: (outcome, the result's JSON or why not)."""
    _reap()  # zombies of an earlier item's processes: they count to the uid's process limit
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        return UNAVAILABLE, f"no process could be started for the check: {exc}"
    if pid == 0:  # pragma: no cover - the child; it never returns
        _child(item, write_fd)
    os.close(write_fd)
    try:
        # framed by its length, not read to the end: a process the check forked holds the
        # pipe open after the child is gone
        header = _read_exactly(read_fd, 4)
        size = int.from_bytes(header, "big") if len(header) == 4 else 0
        sent = _read_exactly(read_fd, size) if size <= RESULT_MAX_BYTES + 1 else b""
    finally:  # the soft time limit lands here too, as an exception while reading
        os.close(read_fd)
        # the clean-up is never cut short by the soft limit: its alarm waits until it is done
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            _end_all(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if size > RESULT_MAX_BYTES + 1:
        return FAILED, f"the check's result is over {RESULT_MAX_BYTES} bytes"
    outcome = _TAGS.get(sent[:1])
    if outcome is None:
        return FAILED, "the check's process died before it sent a result"
    return outcome, sent[1:].decode("utf-8", "replace")


def _child(item: ItemBase, write_fd: int) -> None:
    """Run the check, send one tagged message, exit; whatever it raised or left."""
    message = b"F" + b"the check did not finish"
    try:
        os.setpgid(0, 0)  # its processes in one group, killed together
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # gone with the worker, if that is killed
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # a flood of prints reaches no log, and fills no file
            os.dup2(null, fd)
        os.closerange(3, write_fd)  # the pool's channel: no task of another caller's for it
        os.closerange(write_fd + 1, os.sysconf("SC_OPEN_MAX"))
        try:
            result = _VERIFIER.check(item)
            if type(result) is not _VERIFIER.result_model:
                message = b"F" + (f"check returned {type(result).__name__}, not "
                                  f"{_VERIFIER.result_model.__name__}").encode()
            else:
                message = b"O" + result.model_dump_json().encode()
        except MemoryError:
            message = b"M" + b"exceeded the worker memory cap"
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: the item's doing
            message = b"F" + _describe(exc).encode("utf-8", "replace")
        view = memoryview(len(message).to_bytes(4, "big") + message[:RESULT_MAX_BYTES + 2])
        if len(message) > RESULT_MAX_BYTES + 1:
            view = view[:4]  # its size alone: read as too long
        while view:
            view = view[os.write(write_fd, view):]
    except BaseException:  # noqa: BLE001, S110 - nothing of the child's may reach the worker
        pass
    finally:
        os._exit(0)


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


def _end_all(pid: int) -> None:
    """Kill the child's group, reap it, then every process the check left that came back to
    this worker (orphans of a process that left the group), generation by generation."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)  # before it made its group, if it had not
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    for _ in range(_MAX_ROUNDS):
        _reap()
        left = _children()
        if not left:
            return
        for child in left:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass


def _reap() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _children() -> list[int]:
    """This process's children, from /proc (those a check's processes left orphaned)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command may hold spaces and parentheses: the fields follow the last ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(entry))
    return found


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass
