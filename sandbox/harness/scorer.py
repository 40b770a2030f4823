"""A scoring job (``mode: score``): the items of one request's chunk scored by a library scorer
that may evaluate the model's text as code (reasoning-gym's ``score_answer``: ``eval``,
SymPy's ``parse_expr``, ``sympify``, ``lambdify``). That happens here, in the sandbox, never
on the host.

The scorer's fork server (``scorer_server``) starts in a container the first time a scoring
job lands there and is kept like the Python zygote: root, its own session, registered with
the clean slate (``Slate.keep``) so the sweep spares it and what it holds is the container's
fresh state. Its start (imports, seconds) and the first build of a task's scorer happen
before the chunk's clock starts.

Each chunk is read by a child of its own (``scorer_server.child``): the candidate's uid, the
harness's limits. The server forks it ahead, between executions (its spare, which the sweep
also spares until it is handed a chunk), so the fork is off the chunk's clock. The child
writes one line per item as it goes, and the harness watches:

- an item past ``timeout_s`` (plus ``KILL_SLACK_S``: the child's own alarm stops Python code;
  C code where no signal reaches needs the kill) has its child killed and comes back
  ``timeout``; the rest of the chunk goes to a new child;
- a child that ends or writes nonsense before its last item leaves its item ``error``;
- after ``turn_s`` no new item is started: the reply carries the items scored so far, and
  the host sends the rest through the fair gate again, so a chunk of slow answers holds a
  container for about one turn and one item's limit, not the chunk's.

Reply: ``{"status": "ok", "results": [[status, score, detail, cpu_s], ...]}`` (a prefix of
the items, at least one), or ``{"status": "unavailable", "detail": ...}`` when the image has
no scorer.
"""

from __future__ import annotations

import glob
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time

from . import PACKAGE_PARENT, slate
from .processes import candidate_started, kill_group, oom_kills
from .scorer_server import SCORERS, cpu_seconds

SERVER_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from harness import scorer_server; "
               "scorer_server.server_main(int(sys.argv[2]), sys.argv[3] == '1')")
SERVER_START_S = 120.0  # its imports and first scorer: seconds, more on a loaded machine
WARM_S = 60.0  # building a task's scorer (arc_agi: ~1 s)
KILL_SLACK_S = 1.0  # past an item's limit before its child is killed
MAX_LINE_BYTES = 64 * 1024  # a result line is ~100 bytes; a detail is cut at 500 characters
STATUSES = frozenset({"ok", "error", "timeout", "bad_entry"})
# The server's cache dir: matplotlib (which reasoning-gym imports) needs a writable one. On
# the pool's /checkers tmpfs (root's, which no candidate can write and the slate leaves
# alone), in a directory only root may enter; its font list comes built from the image.
CACHE_DIR = "/checkers/.scorer"
BUILD_HINT = "run: bash sandbox/build_image.sh (where PyPI is reachable)"


class ScorerServer:
    """The harness's handle on a scorer fork server."""

    def __init__(self, guarded):
        self.guarded = guarded
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        os.set_inheritable(theirs.fileno(), True)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/nonexistent",
               # one BLAS thread: threads count against the pids limit, and a fork keeps one
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        cache = _cache_dir()
        if cache is not None:
            env["MPLCONFIGDIR"] = cache
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", SERVER_BOOT, PACKAGE_PARENT, str(theirs.fileno()),
             "1" if guarded else "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd="/", env=env, start_new_session=True, pass_fds=(theirs.fileno(),))
        theirs.close()
        self.warmed = set()  # the tasks it was asked to warm
        self.spare = None  # the pid of the process it forked for the next chunk
        self.kept_spare = None  # the spare the slate spares

    def wait_ready(self):
        """None once it has imported the library; else why it could not."""
        try:
            reply = self._recv("ready", time.monotonic() + SERVER_START_S)
        except (OSError, EOFError, ValueError) as exc:
            return f"the scorer did not start: {type(exc).__name__}: {exc}"
        return reply.get("error")

    def keep_spare(self, state):
        """The slate spares the server's current spare, and no longer an earlier one (a
        spare that became a chunk's child is the sweep's like any candidate process)."""
        if self.kept_spare != self.spare:
            if self.kept_spare is not None:
                state.forget(self.kept_spare)
            if self.spare is not None:
                state.keep(self.spare, rebase=False)
            self.kept_spare = self.spare

    def forget(self, state):
        for pid in (self.process.pid, self.kept_spare):
            state.forget(pid)
        self.kept_spare = None

    def alive(self):
        return self.process.poll() is None

    def warm(self, tasks):
        tasks = sorted(set(tasks) - self.warmed)
        if tasks:  # a round trip only for tasks it has not built yet
            self.warmed.update(tasks)
            socket.send_fds(self.control, [json.dumps({"op": "warm", "tasks": tasks}).encode()],
                            [])
            self._recv("warmed", time.monotonic() + WARM_S)

    def fork(self, items_fd, results_fd, job, cwd, cpu_s, start):
        socket.send_fds(self.control, [json.dumps({
            "op": "fork", "cwd": cwd, "memory_mb": job["memory_mb"], "cpu_s": cpu_s,
            "timeout_s": job["timeout_s"], "start": start}).encode()], [items_fd, results_fd])
        pid = self._recv("started", time.monotonic() + 10)["pid"]
        self.spare = None  # it was the spare, or the server forked one on the spot
        return pid

    def refill(self, state):
        """A spare for the next chunk, forked now, between executions (and kept by the
        slate before the next sweep)."""
        if self.spare is None:
            socket.send_fds(self.control, [b'{"op": "spare"}'], [])
            self._recv("spare", time.monotonic() + 10)
        self.keep_spare(state)

    def reap(self, pid):
        """The child's wait status (it was killed or has ended); None if the server fails
        to say within seconds (then it is closed, and the next job starts another)."""
        try:
            return self._recv("exited", time.monotonic() + 10, pid)["status"]
        except (OSError, EOFError, ValueError):
            self.close()
            return None

    def _recv(self, op, deadline, pid=None):
        while True:
            self.control.settimeout(max(0.001, deadline - time.monotonic()))
            data = self.control.recv(1 << 16)
            if not data:
                raise EOFError("the scorer's server closed its channel")
            message = json.loads(data)
            if "spare" in message:
                self.spare = message["spare"]
            if message.get("op") == op and (pid is None or message.get("pid") == pid):
                return message

    def close(self):
        kill_group(self.process)
        self.process.wait()
        self.control.close()


class _Server:
    current = None  # the ScorerServer of this container, once a scoring job started one


def _cache_dir():
    """A directory of root's for matplotlib's cache, with the image's font list; None where
    the pool's /checkers tmpfs is not mounted (run by hand)."""
    root = os.path.dirname(CACHE_DIR)
    if not slate.isolated() or not os.path.ismount(root):
        return None
    os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
    for built in glob.glob(os.path.join(SCORERS, "matplotlib", "fontlist-*.json")):
        target = os.path.join(CACHE_DIR, os.path.basename(built))
        if not os.path.exists(target):
            shutil.copyfile(built, target)
    return CACHE_DIR


def refill(state):
    """After an execution was answered: the scorer's server, if this container has one, forks
    the next chunk's process now, while the container waits for its next job."""
    server = _Server.current
    if server is None or not server.alive():
        return
    try:
        server.refill(state)
    except (OSError, EOFError, ValueError):  # the next scoring job starts another
        server.forget(state)
        server.close()
        _Server.current = None


def server_for(guarded, state):
    """The running server (started, and registered with the slate, if need be), or the
    reason there is none."""
    server = _Server.current
    if server is not None and (not server.alive() or server.guarded != guarded):
        server.forget(state)
        server.close()
        server = _Server.current = None
    if server is None:
        if not os.path.isdir(os.path.join(SCORERS, "lib", "reasoning_gym")):
            return None, f"the sandbox image has no scorers (reasoning-gym); {BUILD_HINT}"
        server = ScorerServer(guarded)
        why = server.wait_ready()
        if why is not None:
            server.close()
            return None, f"{why}; {BUILD_HINT}"
        _Server.current = server
        state.keep(server.process.pid)
        server.keep_spare(state)
    return server, None


def run_scoring(job, workdir, state):
    """The chunk's results, a prefix of at least one item (see the module docstring)."""
    # the items as the host encoded them (JSON text): written to each child's chunk as
    # they came, so this process neither parses nor encodes them again (~10 ms a chunk of
    # 256); the child reads and checks them
    items, count, tasks = job.get("items"), job.get("count"), job.get("warm")
    if not (isinstance(items, str) and isinstance(count, int) and count >= 1
            and isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)):
        return {"status": "harness_error", "detail": "a scoring job's items are JSON text "
                "of [task, answer, entry, config] lists, with their count and the tasks to "
                "warm"}
    items = items.encode("utf-8", "surrogatepass")
    server, why = server_for(bool(job.get("guard", True)), state)
    if server is None:
        return {"status": "unavailable", "detail": why}
    server.warm(tasks)
    server.keep_spare(state)  # forked again if it built scorers
    state.rebase()  # the scorers it built are the container's fresh state too
    turn_end = time.monotonic() + job["turn_s"]
    results = []
    while len(results) < count:
        scored, went_on = _one_child(server, items, len(results), count, job, workdir,
                                     turn_end, state)
        if not scored:
            if results:
                break
            return {"status": "harness_error", "detail": "the scorer's server could not fork"}
        results += scored
        if not went_on or time.monotonic() >= turn_end:
            break
    return {"status": "ok", "results": results}


def _one_child(server, items, start, count, job, workdir, turn_end, state):
    """Items scored by one child (``items``' from ``start`` on), and whether the next child
    may go on with the rest."""
    timeout_s = job["timeout_s"]
    chunk = os.memfd_create("chunk")
    read_end, write_end = os.pipe()
    try:
        data = memoryview(items)
        while data:
            data = data[os.write(chunk, data):]
        os.lseek(chunk, 0, os.SEEK_SET)
        candidate_started()
        # its CPU limit: the backstop for one turn's items and the last one's limit
        cpu_s = int(job["turn_s"] + timeout_s + KILL_SLACK_S) + 1
        try:
            pid = server.fork(chunk, write_end, job, workdir, cpu_s, start)
        except (OSError, EOFError, ValueError, KeyError):
            return [], False
        state.forget(pid)  # the spare it was: the chunk's child now, the sweep's
        server.keep_spare(state)
    finally:
        os.close(chunk)
        os.close(write_end)
    oom_before = oom_kills()
    scored, reported_cpu, ended = [], 0.0, None
    buffer = b""
    sel = selectors.DefaultSelector()
    sel.register(read_end, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s + KILL_SLACK_S
    left = count - start
    try:
        while len(scored) < left:
            if time.monotonic() >= turn_end and scored:
                ended = "turn"  # the rest in the host's next turn: not this item's doing
                break
            if not sel.select(max(0.0, deadline - time.monotonic())):
                ended = "timeout"
                break
            data = os.read(read_end, MAX_LINE_BYTES)
            if not data:
                ended = "died"
                break
            buffer += data
            while b"\n" in buffer and len(scored) < left:
                line, buffer = buffer.split(b"\n", 1)
                result = _parse(line)
                if result is None:
                    ended = "malformed"
                    break
                scored.append(result)
                reported_cpu += result[3]
                deadline = time.monotonic() + timeout_s + KILL_SLACK_S
            if ended or len(buffer) > MAX_LINE_BYTES:
                ended = ended or "malformed"
                break
        used = cpu_seconds(pid)
    finally:
        sel.close()
        os.close(read_end)
        _kill(pid)
    status = server.reap(pid)
    if status is None:  # the server is gone with its child: nothing of the candidate's left
        server.forget(state)
        slate.kill_user(slate.CANDIDATE[0])
    if ended in (None, "turn"):
        return scored, ended is None
    spent = max(0.0, (used or 0.0) - reported_cpu)
    scored.append(_ended(ended, status, timeout_s, spent, oom_before))
    return scored, True


def _ended(how, status, timeout_s, cpu_s, oom_before):
    """The result of the item a child was on when it was stopped or ended."""
    if how == "timeout" or (status is not None and os.WIFSIGNALED(status)
                            and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)):
        return ["timeout", 0.0, f"the task's scorer ran past {timeout_s:g} s (stopped from "
                "outside)", round(cpu_s, 4)]
    oom_after = oom_kills()
    if oom_before is not None and oom_after is not None and oom_after > oom_before:
        return ["error", 0.0, "the task's scorer ran out of memory on this answer", 0.0]
    if how == "malformed":
        return ["error", 0.0, "the scorer's process wrote a malformed result on this answer", 0.0]
    code = "unknown" if status is None else os.waitstatus_to_exitcode(status)
    return ["error", 0.0, f"the task's scorer ended its process on this answer (exit {code})",
            0.0]


def _parse(line):
    """A result line, checked: ``[status, score, detail, cpu_s]``; None if malformed."""
    try:
        status, score, detail, cpu_s = json.loads(line)
    except (ValueError, TypeError):
        return None
    if status not in STATUSES or not (detail is None or isinstance(detail, str)):
        return None
    if not isinstance(cpu_s, (int, float)) or not 0 <= cpu_s < 1e6:
        return None
    if score is None:
        if status != "bad_entry":
            return None
    elif not isinstance(score, (int, float)) or isinstance(score, bool) or not 0 <= score <= 1:
        return None
    return [status, None if score is None else float(score),
            None if detail is None else detail[:500], float(cpu_s)]


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
