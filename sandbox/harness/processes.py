"""Running one untrusted process: a session of its own under the candidate's uid and
per-process limits, its output capped, its wall clock enforced, and how it ended classified
(exited, timeout, memory, output limit, runtime error)."""

from __future__ import annotations

import math
import os
import resource
import selectors
import signal
import subprocess
import time

from . import slate
from .statuses import MEMORY_LIMIT, OUTPUT_LIMIT, RUNTIME_ERROR, TIMEOUT

# RLIMIT_FSIZE: a program cannot fill the work dir's tmpfs with one file
FILE_SIZE_LIMIT = 16 * 1024 * 1024
STDERR_HEAD_BYTES = 2048


def compiling(language):
    """The language's row as its compiler runs: with its compile-time memory rule."""
    rule = language.get("compile_memory_rlimit")
    return {**language, "memory_rlimit": rule} if rule else language


def limit_child(memory_mb, cpu_s, cwd=None, memory_rlimit="as", who=slate.CANDIDATE):
    """A preexec_fn: a session of its own (so its group can be killed), the candidate's uid,
    its work dir (entered after the uid change: root may not enter it) and the limits."""

    def apply():
        os.setsid()
        slate.drop_privileges(who)
        if cwd is not None:
            os.chdir(cwd)
        apply_limits(memory_mb, cpu_s, memory_rlimit)

    return apply


class _Started:
    """Whether a program of the candidate's has run in this execution."""

    ran = False


def candidate_started():
    """Called before any program of the candidate's runs: from here on, a failure is the
    candidate's doing (a score of 0), never an outage."""
    _Started.ran = True


def candidate_ran():
    return _Started.ran


def new_execution():
    _Started.ran = False


# Who kills a process where this one may not (the tester: another uid, no capability):
# PID 1, asked on the relay (sandbox/harness/tester.py). None: this process kills.
KILLER = None


def kill_group(process):
    if KILLER is not None:
        KILLER(process)
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.kill()
    except ProcessLookupError:
        pass


def children_cpu_s():
    """The CPU seconds (user and system) of every child this process has waited for: the
    difference across one ``run_process`` is that program's (its own waited-for children's
    included), whether it exited or was killed at its limit."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def oom_kills():
    """The container's OOM-kill count (cgroup v1 or v2); None when unreadable."""
    for path, key in (("/sys/fs/cgroup/memory.events", "oom_kill"),
                      ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill")):
        try:
            with open(path) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def run_process(argv, stdin_data, time_limit_s, memory_mb, output_limit, stderr_tail, cwd, env,
                language=None, who=slate.CANDIDATE):
    """Run ``argv``; returns a dict with status (None = exited), exit code, output, timing,
    and whether it started at all (a full pids limit or memory can refuse the fork).
    ``language`` (its row of sandbox/languages.py) says how ``memory_mb`` is enforced;
    ``who``: the uid and gid it runs as (the candidate's, or the dataset checker's)."""
    language = language or {}
    memory_rlimit = language.get("memory_rlimit", "as")
    if memory_mb and memory_rlimit == "data":
        memory_mb += language.get("memory_overhead_mb", 0)
    oom_before = oom_kills()
    started = time.monotonic()
    if who == slate.CANDIDATE:
        candidate_started()
    try:
        process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, preexec_fn=limit_child(memory_mb, math.ceil(time_limit_s) + 1, cwd,
                                                memory_rlimit, who),
        )
    except (OSError, subprocess.SubprocessError) as exc:  # the fork, or preexec_fn
        return {"status": RUNTIME_ERROR, "code": None, "stdout": b"", "started": False,
                "stderr": f"cannot start: {exc}".encode(), "time_ms": 0.0}
    return supervise(process, stdin_data, started, time_limit_s, output_limit, stderr_tail,
                     oom_before, language.get("memory_markers", ()))


def supervise(process, stdin_data, started, time_limit_s, output_limit, stderr_tail,
              oom_before, memory_markers=()):
    """Feed stdin, collect capped output, enforce the wall-clock limit, classify the end.
    ``process`` is a Popen or a ForkedProcess (same interface)."""
    deadline = started + time_limit_s
    out, err = bytearray(), bytearray()
    err_head = bytearray()  # the start too: V8 and Go print why they died, then a stack dump
    err_total = 0
    status = None
    sel = selectors.DefaultSelector()
    if stdin_data:
        os.set_blocking(process.stdin.fileno(), False)
        sel.register(process.stdin, selectors.EVENT_WRITE)
    else:
        process.stdin.close()
    sel.register(process.stdout, selectors.EVENT_READ)
    sel.register(process.stderr, selectors.EVENT_READ)
    # The test ends when the program's main process exits, even if a child it left behind
    # still holds the pipes open; a pidfd wakes us at that exit.
    exited = exit_notifier(process.pid)
    if exited is not None:
        sel.register(exited, selectors.EVENT_READ)
    pending = memoryview(stdin_data)
    while len(sel.get_map()) and status is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            status = TIMEOUT
            break
        if process.poll() is not None:
            drain(process, out, err, output_limit)
            break
        for key, _ in sel.select(min(remaining, 0.5 if exited is not None else 0.02)):
            if key.fileobj is exited:
                continue  # loop round: poll() sees the exit
            if key.fileobj is process.stdin:
                try:
                    pending = pending[os.write(key.fd, pending[:65536]):]
                except (BrokenPipeError, OSError):
                    pending = pending[:0]
                if not pending:
                    sel.unregister(process.stdin)
                    process.stdin.close()
                continue
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            if key.fileobj is process.stdout:
                out += chunk
                if len(out) > output_limit:
                    status = OUTPUT_LIMIT
                    break
            else:
                err += chunk
                err_head += chunk[:max(0, STDERR_HEAD_BYTES - len(err_head))]
                err_total += len(chunk)
                if err_total > output_limit:
                    status = OUTPUT_LIMIT
                    break
                del err[: max(0, len(err) - 4 * stderr_tail)]
    sel.close()
    if exited is not None:
        os.close(exited)
    if status is None and len(out) > output_limit:
        status = OUTPUT_LIMIT
    if status is None:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            status = TIMEOUT
    elapsed_ms = (time.monotonic() - started) * 1000
    held_back = status == TIMEOUT and starved(process.pid, time_limit_s)
    kill_group(process)
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream and not stream.closed:
            stream.close()
    code = process.returncode
    if status is None:
        status = classify_exit(code, bytes(err), oom_before, memory_markers, bytes(err_head))
    return {"status": status, "code": code, "stdout": bytes(out[:output_limit]),
            "stderr": bytes(err), "time_ms": round(elapsed_ms, 3), "started": True,
            "starved": held_back}


def starved(pid, time_limit_s):
    """At a wall-clock timeout: whether the program still wanted the CPU (runnable) yet had
    used less than half its limit of it. Then the machine's load held it back (or its own
    other processes did): its timeout is a 0 for this run, but no verdict on the program to
    remember or cache. A program that sleeps (waiting, not runnable) or computed for its
    limit is not starved."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rfind(b")") + 2:].split()
        state, cpu_ticks = fields[0], int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return False
    return state == b"R" and cpu_ticks / os.sysconf("SC_CLK_TCK") < time_limit_s / 2


def exit_notifier(pid):
    """A descriptor that becomes readable when ``pid`` exits (Linux >= 5.3), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def drain(process, out, err, output_limit):
    """Read what the exited program left in its pipes, without waiting for the writers that
    outlive it."""
    for stream, buffer in ((process.stdout, out), (process.stderr, err)):
        os.set_blocking(stream.fileno(), False)
        while len(buffer) <= output_limit:
            try:
                chunk = os.read(stream.fileno(), 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            buffer += chunk


def apply_limits(memory_mb, cpu_s, memory_rlimit="as"):
    """``memory_rlimit`` "as" caps the address space; "data" caps writable private memory
    only, for the JVM, Go and V8, which reserve GBs of address space they never touch."""
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        which = resource.RLIMIT_DATA if memory_rlimit == "data" else resource.RLIMIT_AS
        resource.setrlimit(which, (limit, limit))
    if cpu_s:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


# What a compiler driver prints when a signal killed the compiler proper under it (gcc's
# cc1plus, clang's frontend, go's and rustc's children): a kill from outside the source's
# say (the container's or the host's OOM killer, which counts what else lives there).
KILLED_MARKERS = (b"Killed signal terminated program", b"unable to execute command: Killed",
                  b"signal: killed", b"signal: 9, SIGKILL")


def killed_from_outside(result):
    """Whether ``run_process``'s ``result`` ended by SIGKILL, its own or a child's."""
    return (result.get("code") == -signal.SIGKILL
            or any(marker in result["stderr"] for marker in KILLED_MARKERS))


def classify_exit(code, stderr, oom_before, memory_markers=(), stderr_head=b""):
    """None when the process exited normally with 0; else why it did not."""
    oom_after = oom_kills()
    if oom_before is not None and oom_after is not None and oom_after > oom_before:
        return MEMORY_LIMIT
    if code == 0:
        return None
    if code in (-signal.SIGXCPU,):
        return TIMEOUT
    if code == -signal.SIGXFSZ:
        return OUTPUT_LIMIT
    seen = stderr_head + b"\n" + stderr[-2000:]
    markers = (b"MemoryError", b"std::bad_alloc", b"Cannot allocate memory",
               *(m.encode() for m in memory_markers))
    if any(m in seen for m in markers):
        return MEMORY_LIMIT
    return RUNTIME_ERROR


def private_sink(*targets):
    """A memory file of mode 0 as each of ``targets`` (fds): what trusted code prints goes
    there, nobody's verdict. Not a plain file or /dev/null: gVisor lets any uid reopen
    ``/proc/PID/fd/N`` by the file's own permissions (a memfd's are 0777), where a program
    would read what the tests printed (an expected value)."""
    sink = os.memfd_create("stdout")
    os.fchmod(sink, 0)
    for fd in targets:
        os.dup2(sink, fd)
    os.close(sink)


def make_undumpable():
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
        return True
    except Exception:  # noqa: BLE001
        return False
