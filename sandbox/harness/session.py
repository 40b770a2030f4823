"""A session's jobs (``POST /v1/sessions``): one long-lived interpreter (``kernel.py``, run as
the candidate under the snippet's per-process limits) whose namespace outlives each cell.

``session_start`` writes the caller's files into a work dir of the candidate's and starts the
interpreter; ``session_cell`` sends it one cell and supervises it: stdout and stderr read as
they come (each capped at the job's output limit), the wall clock enforced, the answer read
from the interpreter's result pipe; ``session_fetch`` reads files of the work dir back
(``/run_jupyter``'s ``fetch_files``) as ``fetch.py`` reads a snippet's, while every process of
the session is stopped between cells. A container that ran a session never serves another job
(the host takes it out of the pool for good and removes it after), so nothing here is swept.

At a cell's time limit (or past its output limit) the interpreter is **interrupted** (SIGINT,
KeyboardInterrupt in the cell, as Jupyter's interrupt): a loop in Python code stops and the
session keeps its state, which is what a model in a multi-step rollout has built so far. If
it has not answered within ``grace_s`` (it ignores SIGINT, or is stuck in C code that never
checks for signals) its whole process group is killed and the session is lost: a time limit
is a bound, never a request the cell may decline. The same when it dies by itself (memory,
``os._exit``). The host then removes the container.

Before each cell, output that a background process of an earlier cell left in the pipes is
part of this cell's, as a notebook shows it in the cell that runs when it arrives."""

from __future__ import annotations

import base64
import json
import os
import selectors
import signal
import struct
import subprocess
import tempfile
import time

from . import slate
from .fetch import fetch_files
from .processes import exit_notifier, kill_group, limit_child, oom_kills
from .snippet import write_files
from .statuses import HARNESS_ERROR, OK

MODES = frozenset({"session_start", "session_cell", "session_fetch"})
KERNEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel.py")
READY_TIMEOUT_S = 30.0  # the interpreter's start (seconds under gVisor on a loaded host)
# How a cell ended: by itself (its value or exception in the answer), or stopped
FINISHED, TIMEOUT, OUTPUT_LIMIT, DIED = "finished", "timeout", "output_limit", "died"
FRAME_SLACK_BYTES = 64 * 1024  # an answer's JSON beyond its display and traceback texts
START_OUTPUT_BYTES = 64 * 1024  # what the interpreter may print while it starts (why it failed)


class _Kernel:
    """The session's interpreter and the harness's ends of its pipes."""

    def __init__(self, process, cells, results, workdir):
        self.process, self.cells, self.results = process, cells, results
        self.workdir = workdir
        self.idle_exit_s = None


class _State:
    kernel = None
    last_job = 0.0


def idle_deadline():
    """When PID 1 gives up waiting for the host's next job (None: never): a session's
    container that the host has not spoken to for its idle exit time was forgotten (its
    server killed), and ends itself rather than hold memory until a reaper comes."""
    kernel = _State.kernel
    if kernel is None or kernel.idle_exit_s is None:
        return None
    return _State.last_job + kernel.idle_exit_s


def handle(job):
    """One session job's answer."""
    _State.last_job = time.monotonic()
    try:
        if job["mode"] == "session_start":
            return start(job)
        if job["mode"] == "session_fetch":
            return fetch(job)
        return run_cell(job)
    finally:
        _State.last_job = time.monotonic()


def start(job):
    if _State.kernel is not None:
        return {"status": HARNESS_ERROR, "detail": "this container already runs a session"}
    workdir = tempfile.mkdtemp(dir=slate.WORK_ROOT)
    if slate.isolated():
        os.chown(workdir, *slate.CANDIDATE)
    try:
        write_files(job.get("files") or {}, workdir)
    except (OSError, ValueError) as exc:
        return {"status": OK, "started": False, "detail": f"files: {exc}"}
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
           "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    cells_r, cells_w = os.pipe()
    results_r, results_w = os.pipe()
    try:
        process = subprocess.Popen(
            ["python3", "-I", "-u", KERNEL, str(cells_r), str(results_w),
             str(job["display_limit_bytes"])],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            pass_fds=(cells_r, results_w),
            preexec_fn=limit_child(job["memory_mb"], None, workdir, "as"))
    except (OSError, subprocess.SubprocessError) as exc:
        for fd in (cells_r, cells_w, results_r, results_w):
            os.close(fd)
        return {"status": HARNESS_ERROR, "detail": f"the interpreter did not start: {exc}"}
    os.close(cells_r)
    os.close(results_w)
    kernel = _Kernel(process, cells_w, results_r, workdir)
    kernel.idle_exit_s = job.get("idle_exit_s")
    os.set_blocking(results_r, False)
    ready = _supervise(kernel, None, READY_TIMEOUT_S, START_OUTPUT_BYTES, FRAME_SLACK_BYTES)
    if ready["answer"] is None or not ready["answer"].get("ready"):
        kill_group(process)
        process.wait()
        return {"status": HARNESS_ERROR, "detail": "the interpreter did not start: "
                + _err_text(ready)}
    if not _freeze():
        kill_group(process)
        process.wait()
        return {"status": HARNESS_ERROR, "detail": "the interpreter did not start: "
                "its processes could not be stopped"}
    _State.kernel = kernel
    return {"status": OK, "started": True, "python": ready["answer"].get("python")}


def run_cell(job):
    kernel = _State.kernel
    if kernel is None or kernel.process.poll() is not None:
        return {"status": OK, "cell": None, "alive": False,
                "detail": "the session's interpreter is gone"}
    limit = job["output_limit_bytes"]
    while _read(kernel.results):  # answers a forked child wrote after the last cell's
        pass
    frame = _frame({"code": job["code"]})
    _thaw()
    got = _supervise(kernel, frame, job["time_limit_s"], limit, 4 * limit + FRAME_SLACK_BYTES,
                     grace_s=job["grace_s"])
    answer = got["answer"] or {}
    alive = got["ended"] != DIED
    unstoppable = alive and not _freeze()
    if unstoppable:
        got["ended"], alive = DIED, False
    if not alive:
        kill_group(kernel.process)
        kernel.process.wait()
        if slate.isolated():  # the host removes the container; nothing of it runs till then
            slate.kill_user(slate.CANDIDATE[0])
    cell = {"ended": got["ended"], "time_ms": got["time_ms"], "code": got["code"],
            "stdout": base64.b64encode(bytes(got["out"][:limit])).decode(),
            "stderr": base64.b64encode(bytes(got["err"][:limit])).decode(),
            "display": _list(answer.get("display")), "error": _list(answer.get("error")),
            "stopped": got["stopped"], "memory": got["memory"], "unstoppable": unstoppable}
    return {"status": OK, "cell": cell, "alive": alive}


def fetch(job):
    """The files ``job["fetch_files"]`` names, within ``job["limit_bytes"]`` of base64: read
    by a child that holds the candidate's uid, no link followed (``fetch.py``), while the
    session's processes are stopped, so none of them swaps a file as it is read."""
    names = [str(name) for name in job.get("fetch_files") or []]
    kernel = _State.kernel
    if kernel is None:
        return {"status": OK, "files": {}, "cut_files": {},
                "missing": dict.fromkeys(names, "not read: no session runs here")}
    files, missing, cut = fetch_files(names, kernel.workdir, int(job["limit_bytes"]))
    return {"status": OK, "files": files, "missing": missing, "cut_files": cut}


def _freeze():
    """Between cells nothing of the session runs: its interpreter and every process a cell
    left (a background loop, a thread) are stopped until the next cell, which holds a slot
    of the server's fair gate as it runs. Otherwise a session would load the machine outside
    the gate, and another caller's timed test would lose to it. False when they could not
    all be stopped (the session is then lost)."""
    return not slate.isolated() or slate.freeze_user()


def _thaw():
    if slate.isolated():
        slate.thaw_user()


def _supervise(kernel, frame, time_limit_s, output_limit, frame_limit, grace_s=0.0):
    """Send ``frame`` (None: none, wait for the start's ready frame) and wait for the answer.

    ``ended``: FINISHED when it answered; DIED when it exited or was killed (or broke its
    result pipe); ``stopped``: TIMEOUT or OUTPUT_LIMIT when it was interrupted for one
    (then answered, so FINISHED, or did not within the grace, so DIED)."""
    process = kernel.process
    started = time.monotonic()
    deadline = started + time_limit_s
    out, err, answer_buf = bytearray(), bytearray(), bytearray()
    pending = memoryview(frame or b"")
    stopped, ended, answer = None, None, None
    oom_before = oom_kills()
    sel = selectors.DefaultSelector()
    streams = {process.stdout.fileno(): out, process.stderr.fileno(): err}
    for fd in streams:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    sel.register(kernel.results, selectors.EVENT_READ)
    if pending:
        os.set_blocking(kernel.cells, False)
        sel.register(kernel.cells, selectors.EVENT_WRITE)
    exited = exit_notifier(process.pid)
    if exited is not None:
        sel.register(exited, selectors.EVENT_READ)
    try:
        while ended is None:
            now = time.monotonic()
            if now >= deadline:
                if stopped is None and grace_s > 0:
                    stopped, deadline = TIMEOUT, now + grace_s
                    _sigint(process)
                    continue
                stopped = stopped or TIMEOUT
                ended = DIED
                break
            if process.poll() is not None:
                ended = DIED
                break
            for key, _ in sel.select(min(deadline - now, 0.5 if exited is not None else 0.02)):
                fd = key.fd
                if fd == kernel.cells:
                    try:
                        pending = pending[os.write(fd, pending[:65536]):]
                    except OSError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(fd)
                elif fd in streams:
                    chunk = _read(fd)
                    if chunk is None:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        continue
                    buffer = streams[fd]
                    buffer += chunk[:max(0, output_limit + 1 - len(buffer))]
                    if output_limit and len(buffer) > output_limit and stopped is None:
                        stopped, deadline = OUTPUT_LIMIT, time.monotonic() + grace_s
                        _sigint(process)
                elif fd == kernel.results:
                    chunk = _read(fd)
                    if chunk == b"":  # the pipe broke: no answer can come
                        ended = DIED
                        try:  # it is exiting: its exit code says how
                            process.wait(timeout=1.0)
                        except subprocess.TimeoutExpired:
                            pass
                        break
                    answer_buf += chunk or b""
                    answer, bad = _answer(answer_buf, frame_limit, process.pid)
                    if bad:
                        ended = DIED
                        break
                    if answer is not None:
                        ended = FINISHED
                        break
        elapsed = time.monotonic() - started
        if ended == FINISHED:
            for fd, buffer in streams.items():  # flushed before it answered
                while len(buffer) <= output_limit and (chunk := _read(fd)):
                    buffer += chunk[:max(0, output_limit + 1 - len(buffer))]
    finally:
        sel.close()
        if exited is not None:
            os.close(exited)
    after = oom_kills()
    memory = oom_before is not None and after is not None and after > oom_before
    code = process.poll() if ended == DIED else None
    return {"ended": ended, "stopped": stopped, "answer": answer, "out": out, "err": err,
            "time_ms": round(elapsed * 1000, 3), "code": code, "memory": memory}


def _sigint(process):
    try:
        os.kill(process.pid, signal.SIGINT)
    except (ProcessLookupError, PermissionError):
        pass


def _read(fd):
    """Bytes from a non-blocking pipe: b"" at its end, None when nothing is there now."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _answer(buffer, limit, pid):
    """(the interpreter's answer, False) once a whole frame of ``pid``'s is in ``buffer``
    (frames of another process, a child the cell forked, are dropped); (None, True) for a
    frame that cannot be one (too large, not a JSON object)."""
    while len(buffer) >= 4:
        (size,) = struct.unpack(">I", buffer[:4])
        if size > limit:
            return None, True
        if len(buffer) < 4 + size:
            return None, False
        try:
            answer = json.loads(bytes(buffer[4:4 + size]))
        except ValueError:
            return None, True
        del buffer[:4 + size]
        if not isinstance(answer, dict):
            return None, True
        if answer.get("pid") == pid:
            return answer, False
    return None, False


def _frame(obj):
    data = json.dumps(obj).encode("utf-8", "surrogatepass")
    return struct.pack(">I", len(data)) + data


def _list(value):
    return [v for v in value if isinstance(v, dict)][:64] if isinstance(value, list) else []


def _err_text(got):
    return bytes(got["err"][-2000:]).decode("utf-8", "backslashreplace") or (
        f"ended {got['ended']}, exit code {got['code']}")
