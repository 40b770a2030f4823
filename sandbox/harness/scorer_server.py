"""The scorer's fork server, and the child it forks for each chunk (``scorer.py`` is the
harness's side). Runs as ``python3 -I -c SERVER_BOOT``, root, non-dumpable, in a session of
its own, with ``SCORERS``' packages on its path and no other process's.

The server imports reasoning-gym and SymPy once (seconds), installs the guard (a deny-list:
defence in depth here, the sandbox is the boundary), warms each task the first time the
harness names it (``library.warm_task``: its default scorer, run on one entry the library
generates itself, so a child does not pay a first score's imports and caches again), and
freezes what it holds out of the collector's reach, so a child copies few pages. It never
scores a caller's answer and never reads a chunk: each chunk comes as a descriptor that only
its child reads.

The child: its own session, descriptors 3 (the chunk, JSON) and 4 (the results) and
/dev/null as 0-2, nothing else (the control socket closed), the candidate's uid, the address
space it was forked with plus ``memory_mb``, a CPU limit, the chunk's fresh work dir. It
scores the items one by one under a ``SIGALRM`` of ``timeout_s`` and writes one JSON line per
item as it goes: ``[status, score, detail, cpu_s]``. What a hostile answer does to it, it does
to this chunk only: the child exits after the chunk, and the next one is forked afresh.

Forked ahead: the server keeps one spare (``Spare``), forked from itself after the chunk
before was answered, while the container waits for its next job, so a chunk's clock does not
pay the fork (~6 ms of copying page tables for its ~370 MB of address space, out of the
container's one CPU). The spare has read nothing until its chunk's descriptors come; then it
is the child above.
"""

from __future__ import annotations

import fcntl
import gc
import json
import math
import os
import signal
import socket
import sys
import time

from . import slate
from .processes import apply_limits, make_undumpable

SCORERS = "/opt/scorers"  # lib/: the pip packages; src/: the verifier's modules (build_image.sh)
ITEMS_FD, RESULTS_FD = 3, 4
DETAIL_CHARS = 500


class ScoreTimeout(BaseException):
    """The item's SIGALRM: a BaseException, so no scorer's ``except Exception`` eats it."""


def server_main(control_fd, guarded):
    make_undumpable()  # its children inherit it: no child can trace another
    control = socket.socket(fileno=control_fd)
    sys.path[:0] = [os.path.join(SCORERS, "lib"), os.path.join(SCORERS, "src")]
    try:
        from reward_server.verifiers.reasoning_gym import library

        library.warm_up(guarded=guarded)
        from importlib.metadata import version

        ready = {"op": "ready", "library": version("reasoning-gym")}
    except BaseException as exc:  # noqa: BLE001 - an image without scorers: say so, and end
        control.sendall(json.dumps({"op": "ready", "error": f"{type(exc).__name__}: "
                                    f"{exc}"[:DETAIL_CHARS]}).encode())
        return
    guard_again(guarded)  # for what the first scorer's build imported
    gc.freeze()
    warmed = set()
    spare = Spare(guarded)
    control.sendall(json.dumps({**ready, "spare": spare.pid}).encode())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 2)
        except OSError:
            return
        if not message:
            return
        request = json.loads(message)
        if request["op"] == "warm":
            new = [str(task) for task in request["tasks"] if str(task) not in warmed]
            for task in new:
                library.warm_task(task)  # a name of its own DATASETS, else nothing
                warmed.add(task)
            guard_again(guarded)
            gc.freeze()
            if new and spare is not None:  # forked before these scorers were built
                spare.discard()
                spare = Spare(guarded)
            control.sendall(json.dumps({"op": "warmed",
                                        "spare": spare and spare.pid}).encode())
            continue
        if request["op"] == "spare":  # the harness asks between executions, when idle
            spare = spare or Spare(guarded)
            control.sendall(json.dumps({"op": "spare", "spare": spare.pid}).encode())
            continue
        child_pid = (spare or Spare(guarded)).start(message, fds)
        spare = None
        for fd in fds:
            os.close(fd)
        control.sendall(json.dumps({"op": "started", "pid": child_pid}).encode())
        _, status = os.waitpid(child_pid, 0)
        control.sendall(json.dumps({"op": "exited", "pid": child_pid, "status": status}).encode())


def guard_again(guarded):
    """The guard on the modules a scorer's build imported: done here once, so a chunk's
    child, whose ``guard.install`` finds nothing new, copies no page for it."""
    if guarded:
        from reward_server.verifiers.reasoning_gym import guard

        guard.install()


class Spare:
    """A process forked ahead of the chunk it will score, between executions (the harness
    asks for it once it has answered the host, ``scorer.refill``): it waits, root and in the
    server's process group, for its request and descriptors on a socket of its own, then
    becomes the chunk's child (``child``). It ends with the server (its socket's end)."""

    def __init__(self, guarded):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            try:
                ours.close()
                message, fds, _, _ = socket.recv_fds(theirs, 1 << 16, 2)
                if message and len(fds) == 2:
                    child(json.loads(message), fds, guarded)
            finally:
                os._exit(70)
        theirs.close()
        self.socket = ours

    def start(self, message, fds):
        """Hands the chunk's request and descriptors over: the spare's pid, now the chunk's
        child's."""
        socket.send_fds(self.socket, [message], fds)
        self.socket.close()
        return self.pid

    def discard(self):
        self.socket.close()  # its recv_fds reads the end, and it exits
        os.waitpid(self.pid, 0)


def child(request, fds, guarded):
    """Becomes the chunk's scorer: never returns."""
    os.setsid()
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]  # above 0-4, whatever they were
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.dup2(high[0], ITEMS_FD)
    os.dup2(high[1], RESULTS_FD)
    os.closerange(RESULTS_FD + 1, 65536)  # the control socket with the rest
    grown_from = address_space_mb()
    slate.drop_privileges()
    os.chdir(request["cwd"])
    apply_limits(grown_from + request["memory_mb"], request["cpu_s"])
    score_items(request["timeout_s"], guarded, request.get("start", 0))
    os._exit(0)


def address_space_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) // 1024 + 1
    return 0


class _Alarm:
    armed = False


def _on_alarm(signum, frame):
    if _Alarm.armed:
        _Alarm.armed = False
        raise ScoreTimeout


def score_items(timeout_s, guarded, start=0):
    """The chunk on ITEMS_FD from item ``start`` on, scored in order; a line per item on
    RESULTS_FD as it is done."""
    with os.fdopen(ITEMS_FD, "rb") as f:
        items = json.loads(f.read())[start:]
    from reward_server.verifiers.reasoning_gym import library

    if guarded:
        from reward_server.verifiers.reasoning_gym import guard

        guard.install()  # again: for a module a scorer imported late
    signal.signal(signal.SIGALRM, _on_alarm)
    for item in items:
        started = time.process_time()
        try:
            if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)
                    and isinstance(item[1], str) and isinstance(item[2], dict)
                    and isinstance(item[3], str)):
                raise ValueError("a scoring item is [task, answer, entry, config]")
            task, answer, entry, config = item
            _Alarm.armed = True
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            status, score, detail = library.score_one(task, answer, entry, config)
        except ScoreTimeout:
            status, score, detail = "timeout", 0.0, f"the task's scorer ran past {timeout_s:g} s"
        except BaseException as exc:  # noqa: BLE001 - SystemExit and the like, from a scorer
            status, score, detail = "error", 0.0, f"the task's scorer raised on this " \
                                                  f"answer: {exc!r}"
        finally:
            _Alarm.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
        line = [status, None if math.isnan(score) else score,
                None if detail is None else str(detail)[:DETAIL_CHARS],
                round(time.process_time() - started, 4)]
        data = memoryview((json.dumps(line) + "\n").encode("utf-8", "backslashreplace"))
        while data:
            data = data[os.write(RESULTS_FD, data):]


def cpu_seconds(pid):
    """CPU seconds ``pid`` has used (utime + stime of /proc/PID/stat); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None

