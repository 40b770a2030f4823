#!/usr/bin/env python3
"""The harness: runs inside the sandbox container, once per execution (``docker exec``).

It reads one job (JSON) on stdin, runs the untrusted program against each test under
per-process limits, and writes one JSON result on stdout. Standard library only, so it runs
on any image with python3 (>= 3.9).

Why the candidate cannot forge the verdict:
- The verdict travels on this process's stdout, the ``docker exec`` stream. The untrusted
  program runs in child processes that inherit none of this process's descriptors, and this
  process is made non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``), so a child of the same uid
  cannot open ``/proc/<pid>/fd/1``, read its memory or ptrace it.
- Assertion tests (``test_code``) run *here*, never in the candidate's process. The
  candidate's module is loaded in a separate "candidate server" process; ``candidate(...)``
  is a proxy that sends the arguments there and gets the return value back as tagged JSON
  that decodes only to plain data (int, float, str, bytes, bool, None, list, tuple, set,
  dict, complex). So redefining ``check``, monkeypatching builtins, ``sys.exit(0)`` or
  ``os._exit(0)`` before the tests, printing "all tests passed", or returning an object whose
  ``__eq__`` is always True cannot make an assertion pass: the assertion is evaluated by
  this process on plain values, and a candidate that exits makes every later call fail.
- Every program runs under another uid than this process and its fork server (which run as
  root with four capabilities), so it cannot signal, ``prlimit`` or trace them; after each
  execution ``slate`` kills what is left, empties every place the candidate could write and
  checks the container is as it was fresh (issue 10), or reports it dirty.
"""

from __future__ import annotations

import ast
import base64
import json
import math
import os
import resource
import selectors
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # python3 -I: not on the path
import slate  # noqa: E402

WORK_ROOT = slate.WORK_ROOT
FILE_SIZE_LIMIT = 16 * 1024 * 1024


# --- plain-data codec (both directions of the candidate proxy) -------------------------------


def encode(value, depth=0):
    """Tagged JSON for plain data only; anything else raises TypeError."""
    if depth > 100:
        raise TypeError("value nests too deeply")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return {"i": str(value)}
    if t is float:
        return {"f": repr(value)}
    if t is complex:
        return {"c": [repr(value.real), repr(value.imag)]}
    if t is bytes:
        return {"b": base64.b64encode(value).decode()}
    if t is list:
        return {"l": [encode(v, depth + 1) for v in value]}
    if t is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if t is set or t is frozenset:
        return {"s": [encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    raise TypeError(f"a value of type {t.__name__} is not plain data")


def decode(node, depth=0):
    """Inverse of ``encode``; builds only plain values, whatever the input."""
    if depth > 100:
        raise ValueError("value nests too deeply")
    if node is None or isinstance(node, (bool, str)):
        return node
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError("malformed value")
    (tag, v), = node.items()
    if tag == "i":
        return int(v)
    if tag == "f":
        return float(v)
    if tag == "c":
        return complex(float(v[0]), float(v[1]))
    if tag == "b":
        return base64.b64decode(v)
    if tag == "l":
        return [decode(x, depth + 1) for x in v]
    if tag == "t":
        return tuple(decode(x, depth + 1) for x in v)
    if tag == "s":
        return {decode(x, depth + 1) for x in v}
    if tag == "d":
        return {decode(k, depth + 1): decode(x, depth + 1) for k, x in v}
    raise ValueError("malformed value")


def send_frame(fd, obj):
    data = json.dumps(obj).encode()
    os.write(fd, struct.pack(">I", len(data)))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd, n, deadline=None):
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            sel = selectors.DefaultSelector()
            sel.register(fd, selectors.EVENT_READ)
            ready = sel.select(remaining)
            sel.close()
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(fd, deadline=None, max_bytes=64 * 1024 * 1024):
    (size,) = struct.unpack(">I", read_exact(fd, 4, deadline))
    if size > max_bytes:
        raise ValueError("message too large")
    return json.loads(read_exact(fd, size, deadline))


# --- the candidate server: runs the untrusted module, answers calls --------------------------


def serve_candidate(entry_point):
    """Child process: load the solution, then answer proxy calls on fds 3 (in) and 4 (out).

    stdin is /dev/null and stdout goes to stderr, so the solution's prints cannot reach the
    protocol by accident."""
    source = open("solution.py", encoding="utf-8").read()
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - report any failure, SystemExit included
        send_frame(4, {"load_error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    function = namespace.get(entry_point)
    if not callable(function):
        send_frame(4, {"load_error": f"the solution defines no function {entry_point!r}"})
        return
    send_frame(4, {"ready": True})
    while True:
        try:
            request = recv_frame(3)
        except EOFError:
            return
        try:
            args = decode(request["args"])
            kwargs = decode(request["kwargs"])
            result = function(*args, **kwargs)
            reply = {"value": encode(result)}
        except BaseException as exc:  # noqa: BLE001
            reply = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        send_frame(4, reply)


class CandidateCrashed(Exception):
    pass


class CandidateTimeout(Exception):
    pass


class CandidateNotLoaded(BaseException):
    """The test code called the candidate before it was loaded (see ``run_asserts``)."""


class CandidateProxy:
    """Stands for the solution's function inside the test code, in this trusted process."""

    def __init__(self):
        self.process = self.to_child = self.from_child = self.deadline = None

    def __call__(self, *args, **kwargs):
        if self.process is None:
            raise CandidateNotLoaded
        try:
            send_frame(self.to_child, {"args": encode(args), "kwargs": encode(kwargs)})
            reply = recv_frame(self.from_child, self.deadline)
        except TimeoutError:
            raise CandidateTimeout("the solution ran past the time limit") from None
        except (EOFError, OSError, ValueError, struct.error, RecursionError, MemoryError):
            raise CandidateCrashed("the solution's process ended or broke the protocol") from None
        if not isinstance(reply, dict) or len(reply) != 1 or not ({"error", "value"} & set(reply)):
            raise CandidateCrashed("the solution's process broke the protocol")
        if "error" in reply:
            raise RuntimeError(f"the solution raised {str(reply['error'])[:500]}")
        try:
            return decode(reply["value"])
        except (ValueError, TypeError, OverflowError, RecursionError, AttributeError):
            raise CandidateCrashed("the solution returned a value that is not plain data") from None


# --- running one process under limits ---------------------------------------------------------


def limit_child(memory_mb, cpu_s, cwd=None):
    """A preexec_fn: a session of its own (so its group can be killed), the candidate's uid,
    its work dir (entered after the uid change: root may not enter it) and the limits."""

    def apply():
        os.setsid()
        slate.drop_privileges()
        if cwd is not None:
            os.chdir(cwd)
        apply_limits(memory_mb, cpu_s)

    return apply


def candidate_started():
    """Called before any program of the candidate's runs: from here on, a failure is the
    candidate's doing (a score of 0), never an outage (issue 10)."""
    global CANDIDATE_RAN
    CANDIDATE_RAN = True


CANDIDATE_RAN = False


def kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.kill()
    except ProcessLookupError:
        pass


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


def run_process(argv, stdin_data, time_limit_s, memory_mb, output_limit, stderr_tail, cwd, env):
    """Run ``argv``; returns a dict with status (None = exited), exit code, output, timing."""
    oom_before = oom_kills()
    started = time.monotonic()
    candidate_started()
    try:
        process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, preexec_fn=limit_child(memory_mb, math.ceil(time_limit_s) + 1, cwd),
        )
    except OSError as exc:
        return {"status": "runtime_error", "code": None, "stdout": b"",
                "stderr": f"cannot start: {exc}".encode(), "time_ms": 0.0}
    return supervise(process, stdin_data, started, time_limit_s, output_limit, stderr_tail,
                     oom_before)


def supervise(process, stdin_data, started, time_limit_s, output_limit, stderr_tail,
              oom_before):
    """Feed stdin, collect capped output, enforce the wall-clock limit, classify the end.
    ``process`` is a Popen or a ForkedProcess (same interface)."""
    deadline = started + time_limit_s
    out, err = bytearray(), bytearray()
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
            status = "timeout"
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
                    status = "output_limit"
                    break
            else:
                err += chunk
                err_total += len(chunk)
                if err_total > output_limit:
                    status = "output_limit"
                    break
                del err[: max(0, len(err) - 4 * stderr_tail)]
    sel.close()
    if exited is not None:
        os.close(exited)
    if status is None and len(out) > output_limit:
        status = "output_limit"
    if status is None:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            status = "timeout"
    elapsed_ms = (time.monotonic() - started) * 1000
    kill_group(process)
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream and not stream.closed:
            stream.close()
    code = process.returncode
    if status is None:
        status = classify_exit(code, bytes(err), oom_before)
    return {"status": status, "code": code, "stdout": bytes(out[:output_limit]),
            "stderr": bytes(err), "time_ms": round(elapsed_ms, 3)}


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


# --- the Python fork server ----------------------------------------------------------------
#
# Starting an interpreter costs ~25 ms per test; forking a warm one costs ~1 ms. The fork
# server ("zygote") is a fresh interpreter started between executions, before any job is
# known; it holds no test data, only the program it is given. For each test it forks a child
# that takes the test's pipes as stdin/stdout/stderr, lowers its limits and runs the program
# as __main__. The zygote reports the child's pid and, later, its wait status.

ZYGOTE_BOOT = ("import sys; sys.path.insert(0, '/opt/harness'); import harness; "
               "harness.zygote_main(int(sys.argv[1]))")
ZYGOTE_MEMORY_MB = 1024


def zygote_main(control_fd):
    """Runs in the zygote: control messages on ``control_fd`` (a Unix socket)."""
    import io
    import socket
    import traceback

    make_undumpable()  # its children inherit this: none can be traced by another
    control = socket.socket(fileno=control_fd)
    code, cwd = None, WORK_ROOT
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 3)
        except OSError:
            return
        if not message:
            return
        request = json.loads(message)
        if request["op"] == "load":  # the source comes as a descriptor: we never enter the
            cwd = request["cwd"]     # work dir, which is the candidate's
            os.environ.update(request["env"])
            try:
                with os.fdopen(fds[0], "rb") as f:
                    code = compile(f.read(), request["name"], "exec")
                reply = {"op": "loaded"}
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                reply = {"op": "loaded", "error": traceback.format_exc(limit=0)}
            control.sendall(json.dumps(reply).encode())
            continue
        pid = os.fork()
        if pid == 0:  # the child: becomes the program
            try:
                os.setsid()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                os.closerange(3, 65536)
                slate.drop_privileges()
                os.chdir(cwd)
                apply_limits(request["memory_mb"], request["cpu_s"])
                sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r")),
                                             encoding="utf-8")
                sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w")),
                                              encoding="utf-8")
                sys.stderr = io.TextIOWrapper(io.FileIO(2, "w"), encoding="utf-8",
                                              write_through=True)
                sys.argv = [request["argv0"]]
                status = run_as_main(code, request["argv0"])
            except BaseException:  # noqa: BLE001
                status = 1
            os._exit(status)
        for fd in fds:
            os.close(fd)
        control.sendall(json.dumps({"op": "started", "pid": pid}).encode())
        _, wait_status = os.waitpid(pid, 0)
        control.sendall(json.dumps({"op": "exited", "pid": pid, "status": wait_status}).encode())


def run_as_main(code, filename):
    """Exit status of running ``code`` the way ``python3 file`` would."""
    import traceback

    namespace = {"__name__": "__main__", "__file__": filename, "__builtins__": __builtins__}
    status = 0
    try:
        exec(code, namespace)
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif isinstance(exc.code, int):
            status = exc.code & 0xFF
        else:
            sys.stderr.write(f"{exc.code}\n")
            status = 1
    except BaseException:  # noqa: BLE001 - an uncaught exception, printed like Python does
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            status = status or 1
    return status


def apply_limits(memory_mb, cpu_s):
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if cpu_s:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def zygote_limits():
    """The fork server's preexec_fn: its own session and memory cap; it keeps root (its
    children drop it), so no candidate can reach it."""
    os.setsid()
    apply_limits(ZYGOTE_MEMORY_MB, None)


class Zygote:
    """The harness's handle on a fork server."""

    def __init__(self):
        import socket

        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        os.set_inheritable(theirs.fileno(), True)

        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", ZYGOTE_BOOT, str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=WORK_ROOT,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                 "PYTHONDONTWRITEBYTECODE": "1"},
            preexec_fn=zygote_limits, pass_fds=(theirs.fileno(),),
        )
        theirs.close()

    def alive(self):
        """Running and not stopped (a program may have sent it SIGSTOP)."""
        if self.process.poll() is not None:
            return False
        try:
            with open(f"/proc/{self.process.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("T", "t", "Z")
        except OSError:
            return False

    def _recv(self, op, deadline, pid=None):
        """The next message ``op`` (for ``pid``); older messages, such as the exit of a
        program the sweep killed, are skipped."""
        while True:
            self.control.settimeout(max(0.001, deadline - time.monotonic()))
            data = self.control.recv(1 << 20)
            if not data:
                raise EOFError
            message = json.loads(data)
            if message.get("op") == op and (pid is None or message.get("pid") == pid):
                return message

    def load(self, source, name, cwd, env, deadline):
        """None when the program compiled; else the error text."""
        import socket

        fd = os.memfd_create("source")
        try:
            data = memoryview(source.encode("utf-8", "surrogatepass"))
            while data:
                data = data[os.write(fd, data):]
            os.lseek(fd, 0, os.SEEK_SET)
            socket.send_fds(self.control, [json.dumps({
                "op": "load", "name": name, "cwd": cwd, "env": env}).encode()], [fd])
        finally:
            os.close(fd)
        return self._recv("loaded", deadline).get("error")

    def start(self, memory_mb, cpu_s, argv0):
        import socket

        fds = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
        theirs = [fds[0][0], fds[1][1], fds[2][1]]
        socket.send_fds(self.control, [json.dumps({
            "op": "run", "memory_mb": memory_mb, "cpu_s": cpu_s, "argv0": argv0}).encode()],
            theirs)
        for fd in theirs:
            os.close(fd)
        pid = self._recv("started", time.monotonic() + 10)["pid"]
        return ForkedProcess(self, pid, fds[0][1], fds[1][0], fds[2][0])

    def close(self):
        kill_group(self.process)
        self.process.wait()
        self.control.close()


class ForkedProcess:
    """A zygote's child, with the part of Popen's interface that ``supervise`` uses."""

    def __init__(self, zygote, pid, stdin_fd, stdout_fd, stderr_fd):
        self.zygote, self.pid, self.returncode = zygote, pid, None
        self.stdin = os.fdopen(stdin_fd, "wb", buffering=0)
        self.stdout = os.fdopen(stdout_fd, "rb", buffering=0)
        self.stderr = os.fdopen(stderr_fd, "rb", buffering=0)

    def poll(self):
        if self.returncode is None:
            try:
                reply = self.zygote._recv("exited", time.monotonic(), self.pid)
            except TimeoutError:
                return None
            except (OSError, EOFError, ValueError):
                return self._poll_orphan()  # the program killed the zygote
            self.returncode = os.waitstatus_to_exitcode(reply["status"])
        return self.returncode

    def _poll_orphan(self):
        """With the zygote gone, its child is re-parented to us (PID 1): wait for it here."""
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            if not os.path.exists(f"/proc/{self.pid}"):
                self.returncode = -signal.SIGKILL  # gone, and its status with it
            return self.returncode
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        deadline = time.monotonic() + (60 if timeout is None else timeout)
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("program", timeout)
            time.sleep(0.001)
        return self.returncode

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def classify_exit(code, stderr, oom_before):
    """None when the process exited normally with 0; else why it did not."""
    oom_after = oom_kills()
    if oom_before is not None and oom_after is not None and oom_after > oom_before:
        return "memory_limit"
    if code == 0:
        return None
    if code in (-signal.SIGXCPU,):
        return "timeout"
    if code == -signal.SIGXFSZ:
        return "output_limit"
    tail = stderr[-2000:]
    if b"MemoryError" in tail or b"std::bad_alloc" in tail or b"Cannot allocate memory" in tail:
        return "memory_limit"
    return "runtime_error"


# --- comparing outputs ------------------------------------------------------------------------


def lines_of(text):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def tokens_match(expected, actual, tolerance):
    a, b = expected.split(), actual.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not math.isclose(fx, fy, rel_tol=tolerance, abs_tol=tolerance):
            return False
    return True


def outputs_match(expected, actual, tolerance):
    """All lines, each with trailing whitespace trimmed; trailing blank lines ignored."""
    want, got = lines_of(expected), lines_of(actual)
    if len(want) != len(got):
        return False
    if tolerance is None:
        return want == got
    return all(tokens_match(w, g, tolerance) for w, g in zip(want, got))


# --- the two kinds of job ---------------------------------------------------------------------


def tail(data, limit):
    """The end of a program's output as text: invalid UTF-8 escaped (``\\xff``)."""
    text = data.decode("utf-8", "backslashreplace") if isinstance(data, bytes) else data
    return text[-limit:]


def printable(value):
    """``value`` with every string valid Unicode: a lone surrogate a program put in a message
    or a return value becomes the text ``\\ud800``, so no verdict fails to encode (issue 10)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def compile_program(job, workdir, env):
    language = job["language"]
    if not language.get("compile"):
        return None
    limit = min(job["compile_time_limit_s"], job["deadline"] - time.monotonic())
    result = run_process(
        language["compile"], b"", limit, job["compile_memory_mb"],
        job["output_limit_bytes"], job["stderr_tail_bytes"], workdir, env,
    )
    if result["status"] is None:
        return None
    reason = f"the compiler ran past its time limit ({limit:.1f} s)" if (
        result["status"] == "timeout") else tail(result["stderr"], job["stderr_tail_bytes"])
    return {"status": "compile_error", "detail": reason}


def run_stdio(job, workdir, env, zygote=None):
    failure = compile_program(job, workdir, env)
    if failure:
        return failure
    use_zygote = job["language"].get("forkserver") and zygote is not None and zygote.alive()
    if use_zygote:
        try:
            error = zygote.load(job["source"], job["language"]["source"], workdir, env,
                                time.monotonic() + job["time_limit_s"])
        except (TimeoutError, OSError, EOFError, ValueError):
            use_zygote, error = False, None  # fall back to a fresh interpreter per test
            kill_group(zygote.process)  # and replace it after this execution
        if error is not None:
            return {"status": "syntax_error", "detail": error[-job["stderr_tail_bytes"]:]}
    results = []
    for index, test in enumerate(job["tests"]):
        limit = time_left(job)
        if limit <= 0:
            return {"status": "ok", "tests": results + over_budget(job, len(job["tests"]) - index)}
        stdin_data = test["input"].encode("utf-8", "surrogatepass")
        if use_zygote and not zygote.alive():
            use_zygote = False  # a test's program killed it: run the rest the slow way
        if use_zygote:
            run = run_forked(zygote, job, stdin_data, limit)
        else:
            run = run_process(
                job["language"]["run"], stdin_data, limit, job["memory_mb"],
                job["output_limit_bytes"], job["stderr_tail_bytes"], workdir, env,
            )
        status = run["status"]
        if not results and status == "runtime_error" and is_syntax_error(job, run):
            return {"status": "syntax_error",
                    "detail": tail(run["stderr"], job["stderr_tail_bytes"])}
        if status is None:
            actual = run["stdout"].decode("utf-8", "replace")
            status = "passed" if outputs_match(test["output"], actual,
                                               test.get("tolerance")) else "wrong_answer"
        results.append({"status": status, "time_ms": run["time_ms"],
                        "stderr": tail(run["stderr"], job["stderr_tail_bytes"])})
        if status != "passed" and job.get("stop_on_failure"):
            return {"status": "ok", "tests": results + skipped(len(job["tests"]) - index - 1)}
    return {"status": "ok", "tests": results}


def time_left(job):
    """This test's time limit: the per-test limit, or what is left of the item's budget."""
    return min(job["time_limit_s"], job["deadline"] - time.monotonic())


def over_budget(job, count):
    message = f"not run: the item's wall-clock budget of {job['budget_s']:g} s was spent"
    return [{"status": "timeout", "time_ms": 0.0, "stderr": message} for _ in range(count)]


def skipped(count):
    """Tests after the first failure of an all-or-nothing item: the score is 0 already."""
    message = "not run: an earlier test failed and the item is all-or-nothing"
    return [{"status": "skipped", "time_ms": 0.0, "stderr": message} for _ in range(count)]


def run_forked(zygote, job, stdin_data, time_limit_s):
    oom_before = oom_kills()
    started = time.monotonic()
    candidate_started()
    try:
        process = zygote.start(job["memory_mb"], math.ceil(time_limit_s) + 1,
                               job["language"]["source"])
    except (OSError, EOFError, ValueError, KeyError) as exc:
        return {"status": "runtime_error", "code": None, "stdout": b"",
                "stderr": f"cannot start: {exc}".encode(), "time_ms": 0.0}
    return supervise(process, stdin_data, started, time_limit_s,
                     job["output_limit_bytes"], job["stderr_tail_bytes"], oom_before)


def is_syntax_error(job, run):
    last_lines = run["stderr"].decode("utf-8", "replace").strip().splitlines()[-1:]
    markers = job.get("syntax_error_markers") or []
    return any(line.startswith(m) for line in last_lines for m in markers)


def split_tests(test_code):
    """(setup statements, tests): each top-level ``assert`` is one test; a ``check`` function
    makes the whole suite one test, called with the candidate."""
    tree = ast.parse(test_code, "test_code")
    if any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
        return tree.body, ["check"]
    setup = [n for n in tree.body if not isinstance(n, ast.Assert)]
    asserts = [n for n in tree.body if isinstance(n, ast.Assert)]
    return setup, asserts


def mentions(node, names):
    """Whether running the statement ``node`` may use one of ``names``. A function's body does
    not run when it is defined: only its decorators, defaults and annotations count."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and n.id in names:
            return True
        body = ([n.body] if isinstance(n, ast.Lambda) else n.body) if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else []
        stack.extend(c for c in ast.iter_child_nodes(n) if not any(c is b for b in body))
    return False


def run_asserts(job, workdir, env):
    """The dataset's setup that does not use the candidate runs first: a failure there is the
    dataset's (``bad_tests``, null). Then the candidate loads, and from there on every failure
    is a failed test (issue 10)."""
    try:
        setup, tests = split_tests(job["test_code"])
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return {"status": "bad_tests", "detail": f"test_code does not parse: {exc}"}
    if not tests:
        return {"status": "bad_tests", "detail": "test_code has no assert and no check()"}
    proxy = CandidateProxy()
    namespace = {"__name__": "__test__", "candidate": proxy, job["entry_point"]: proxy}
    statements = list(setup) if tests == ["check"] else job_statements(setup, tests)
    names = {"candidate", job["entry_point"]}
    while statements and not isinstance(statements[0], ast.Assert) and not mentions(
            statements[0], names):
        try:
            exec(as_module(statements[0]), namespace)
        except CandidateNotLoaded:
            break  # it reached the candidate through a helper: run it once the candidate is up
        except Exception as exc:  # noqa: BLE001 - the dataset's test code is broken
            return {"status": "bad_tests",
                    "detail": f"test setup failed: {type(exc).__name__}: {exc}"}
        statements.pop(0)

    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    stderr_fd = os.memfd_create("stderr")
    code = ("import os, sys; os.dup2({r}, 3); os.dup2({w}, 4); "
            "os.dup2(os.open(os.devnull, os.O_RDONLY), 0); os.dup2(2, 1); "
            "sys.path.insert(0, '/opt/harness'); import harness; harness.serve_candidate({e!r})"
            ).format(r=to_child_r, w=from_child_w, e=job["entry_point"])
    candidate_started()
    process = subprocess.Popen(
        [sys.executable, "-I", "-c", code], stdin=subprocess.DEVNULL, stdout=stderr_fd,
        stderr=stderr_fd, env=env, preexec_fn=limit_child(job["memory_mb"], None, workdir),
        pass_fds=(to_child_r, from_child_w),
    )
    os.close(to_child_r)
    os.close(from_child_w)
    proxy.process, proxy.to_child, proxy.from_child = process, to_child_w, from_child_r

    def stderr_tail():
        size = os.fstat(stderr_fd).st_size
        data = os.pread(stderr_fd, job["stderr_tail_bytes"],
                        max(0, size - job["stderr_tail_bytes"]))
        return data.decode("utf-8", "backslashreplace")

    def fail_all(status, message):
        return {"status": "ok", "tests": [{"status": status, "time_ms": 0.0, "stderr": message}
                                          for _ in tests]}

    try:
        try:
            hello = recv_frame(from_child_r, time.monotonic() + time_left(job))
        except TimeoutError:
            return fail_all("timeout", "the solution did not finish loading in time")
        except Exception:  # noqa: BLE001 - EOF, or a frame that is not JSON
            hello = {"load_error": "the solution exited while loading"}
        if hello != {"ready": True} and not (
                isinstance(hello, dict) and set(hello) == {"load_error"}
                and isinstance(hello["load_error"], str)):
            return fail_all("runtime_error", "the solution's process broke the protocol")
        if "load_error" in hello:
            detail = hello["load_error"] + "\n" + stderr_tail()
            status = "syntax_error" if hello["load_error"].startswith("SyntaxError") else "ok"
            return {"status": status, "detail": detail.strip()[-job["stderr_tail_bytes"]:],
                    "tests": [{"status": "runtime_error", "time_ms": 0.0,
                               "stderr": detail[-job["stderr_tail_bytes"]:]} for _ in tests]}
        results = []
        if tests == ["check"]:
            statements.append("check")
        for node in statements:
            if time_left(job) <= 0:
                return {"status": "ok",
                        "tests": results + over_budget(job, len(tests) - len(results))}
            if node == "check" or isinstance(node, ast.Assert):
                module = None if node == "check" else as_module(node)
                call = ((lambda: namespace["check"](proxy)) if module is None
                        else (lambda: exec(module, namespace)))  # noqa: B023 - called at once
                results.append(run_one(call, proxy, job, stderr_tail))
                if results[-1]["status"] != "passed" and job.get("stop_on_failure"):
                    return {"status": "ok",
                            "tests": results + skipped(len(tests) - len(results))}
                continue
            proxy.deadline = time.monotonic() + time_left(job)
            try:
                exec(as_module(node), namespace)
            except Exception as exc:  # noqa: BLE001 - after the candidate ran: its doing
                message = f"the test code failed after the solution loaded: " \
                          f"{type(exc).__name__}: {exc}"
                return {"status": "ok", "tests": results + [
                    {"status": "runtime_error", "time_ms": 0.0, "stderr": message[-2000:]}
                    for _ in range(len(tests) - len(results))]}
        return {"status": "ok", "tests": results}
    finally:
        for fd in (to_child_w, from_child_r, stderr_fd):
            os.close(fd)
        kill_group(process)
        process.wait()


def as_module(node):
    return compile(ast.Module(body=[node], type_ignores=[]), "test_code", "exec")


def job_statements(setup, tests):
    """Setup and assert statements in source order."""
    return sorted(setup + tests, key=lambda n: (n.lineno, n.col_offset))


def run_one(call, proxy, job, stderr_tail):
    started = time.monotonic()
    proxy.deadline = started + time_left(job)
    oom_before = oom_kills()
    status, message = "passed", ""
    try:
        call()
    except AssertionError as exc:
        status, message = "wrong_answer", f"AssertionError: {exc}"
    except CandidateTimeout as exc:
        status, message = "timeout", str(exc)
    except CandidateCrashed as exc:
        status, message = "runtime_error", str(exc)
    except Exception as exc:  # noqa: BLE001 - the solution raised through the proxy
        status, message = "runtime_error", f"{type(exc).__name__}: {exc}"
    if status != "passed":
        oom_after = oom_kills()
        if "MemoryError" in message or (
            oom_before is not None and oom_after is not None and oom_after > oom_before
        ):
            status = "memory_limit"
    if status == "timeout":
        kill_group(proxy.process)  # a stuck call leaves the solution unusable
    elapsed = (time.monotonic() - started) * 1000
    text = (message + "\n" + stderr_tail()).strip()
    return {"status": status, "time_ms": round(elapsed, 3),
            "stderr": text[-job["stderr_tail_bytes"]:]}


# --- the execution ----------------------------------------------------------------------------


def make_undumpable():
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
        return True
    except Exception:  # noqa: BLE001
        return False


def prepare_workdir(job):
    """A fresh work dir: made by root with the source in it, then handed to the candidate's uid
    (root cannot enter it afterwards, and does not need to)."""
    workdir = tempfile.mkdtemp(dir=WORK_ROOT)
    source = os.path.join(workdir, "solution.py" if job["mode"] == "assert"
                          else job["language"]["source"])
    with open(source, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(job["source"])  # a lone surrogate stays invalid UTF-8: the compiler's to judge
    if slate.isolated():
        os.chown(source, *slate.CANDIDATE)
        os.chown(workdir, *slate.CANDIDATE)
    return workdir


def execute(job, zygote, state):
    """One execution in a fresh work dir; afterwards the container is swept and checked
    against its fresh state (``state``), and reported dirty unless it matches."""
    global CANDIDATE_RAN
    CANDIDATE_RAN = False
    spare = (zygote.process.pid,) if zygote is not None else ()
    job = {**job, "deadline": time.monotonic() + (job.get("budget_s") or math.inf)}
    workdir = None
    try:
        workdir = prepare_workdir(job)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
        if job["mode"] == "stdio":
            result = run_stdio(job, workdir, env, zygote)
        else:
            result = run_asserts(job, workdir, env)
    except Exception as exc:  # noqa: BLE001 - report, never die: we are PID 1
        detail = f"{type(exc).__name__}: {exc}"[:500]
        # once a program of the candidate's ran, a failure is its doing: failed tests (0)
        result = ({"status": "ok", "tests": [], "candidate_failed": True,
                   "detail": f"the run failed after the program started: {detail}"}
                  if CANDIDATE_RAN else {"status": "harness_error", "detail": detail})
    finally:
        left_behind = slate.other_processes(exclude=spare)
        try:
            slate.sweep(keep=spare)
            problems = [why for why in [slate.janitor(workdir)] if why]
            if workdir is not None:
                try:
                    os.rmdir(workdir)
                except OSError as exc:
                    problems.append(f"work dir not removed: {exc}")
            problems += state.problems(zygote)
        except Exception as exc:  # noqa: BLE001 - unproven is dirty; and we are PID 1
            problems = [f"the clean-up failed: {type(exc).__name__}: {exc}"]
    result["left_behind"] = len(left_behind)
    result["dirty"] = bool(left_behind or problems)
    result["unclean"] = problems[:5]
    return result


def spawn_zygote():
    try:
        return Zygote()
    except OSError:
        return None


def serve():
    """The container's main process (PID 1, which no process inside can kill): read
    length-prefixed jobs on stdin, answer each with a length-prefixed result on stdout."""
    undumpable = make_undumpable()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    zygote = spawn_zygote()
    state = slate.Slate(zygote)
    while True:
        try:
            job = recv_frame(0)
        except EOFError:
            return
        if job.get("mode") == "ping":  # the pool checks a new container with this
            send_frame(1, {"status": "pong", "undumpable": undumpable,
                           "isolated": slate.isolated(), "unclean": state.problems(zygote)})
            continue
        if zygote is None or not zygote.alive():
            zygote = respawn(zygote, state)
        result = execute(job, zygote, state)
        result["undumpable"] = undumpable
        send_frame(1, printable(result))
        # the zygote outlives executions: it holds no state but the last program's code,
        # which the next load replaces, and no candidate can reach it (another uid).
        if zygote is None or not zygote.alive():
            zygote = respawn(zygote, state)


def respawn(zygote, state):
    if zygote is not None:
        zygote.close()
    zygote = spawn_zygote()
    state.watch(zygote)
    return zygote


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-candidate":
        serve_candidate(sys.argv[2])
    else:
        serve()
