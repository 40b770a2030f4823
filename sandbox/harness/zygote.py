"""The Python fork server ("zygote"). Starting an interpreter costs ~25 ms per test; forking a
warm one costs ~1 ms.

The zygote is a fresh interpreter started between executions, before any job is known; it
holds no test data, only the program it is given. For each test it forks a child that takes
the test's pipes as stdin/stdout/stderr, drops to the candidate's uid, lowers its limits and
runs the program as ``__main__``. The zygote reports the child's pid and, later, its wait
status. It keeps root (its children drop it), so no candidate can reach it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

from . import PACKAGE_PARENT, slate
from .processes import (
    apply_limits,
    candidate_started,
    kill_group,
    make_undumpable,
    oom_kills,
    supervise,
)
from .statuses import RUNTIME_ERROR

ZYGOTE_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from harness import zygote; "
               "zygote.zygote_main(int(sys.argv[2]))")
ZYGOTE_MEMORY_MB = 1024


def zygote_main(control_fd):
    """Runs in the zygote: control messages on ``control_fd`` (a Unix socket)."""
    import io
    import socket
    import traceback

    from . import candidate_server  # imported once here: a forked candidate server starts warm

    make_undumpable()  # its children inherit this: none can be traced by another
    control = socket.socket(fileno=control_fd)
    code, cwd = None, slate.WORK_ROOT
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 5)
        except OSError:
            return
        if not message:
            return
        request = json.loads(message)
        if request["op"] == "ready":
            control.sendall(b'{"op": "ready"}')
            continue
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
                os.closerange(len(fds), 65536)
                slate.drop_privileges()
                if request["op"] == "script":  # a snippet (run_code): its own source
                    os._exit(run_script(request))
                if request["op"] == "serve":  # an assertion job's candidate server
                    os.chdir(request["cwd"])
                    os.environ.update(request["env"])
                    apply_limits(request["memory_mb"], None)
                    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w"), encoding="utf-8",
                                                  write_through=True)
                    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w"), encoding="utf-8",
                                                  write_through=True)
                    candidate_server.serve_candidate(request["entry_point"], request["preamble"],
                                                     request["setup"])
                    os._exit(0)
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


def run_script(request):
    """A snippet's child (op ``script``), as ``python3 -s main.py`` runs it: the source comes
    on fd 3 and is read and compiled here, after the uid drop and under the program's limits,
    so it never enters the zygote's memory (where a later program forked from it could read
    it); the script's directory first on the path; stdout unbuffered as PYTHONUNBUFFERED asks;
    a syntax error printed as Python prints it; at the end, threads joined and atexit run."""
    import io

    cwd, path = request["cwd"], os.path.join(request["cwd"], request["argv0"])
    os.chdir(cwd)
    os.environ.update(request["env"])
    apply_limits(request["memory_mb"], request["cpu_s"])
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    # the zygote's -I ignored these variables; the program's python3 would not
    sys.dont_write_bytecode = bool(request["env"].get("PYTHONDONTWRITEBYTECODE"))
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r")), encoding="utf-8")
    raw = io.FileIO(1, "w")
    sys.stdout = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw),
                                  encoding="utf-8", write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w"), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    with os.fdopen(3, "rb") as f:
        source = f.read()
    try:
        code = compile(source, path, "exec")
    except BaseException as exc:  # noqa: BLE001 - SyntaxError, null bytes, MemoryError
        print_uncaught(exc, None)  # no frames: python3 prints none for these
        sys.stderr.flush()
        return 1
    sys.argv = [request["argv0"]]
    sys.path[:] = [cwd, *(p for p in sys.path if p != PACKAGE_PARENT)]
    return run_as_main(code, path, finish=True)


def run_as_main(code, filename, finish=False):
    """Exit status of running ``code`` the way ``python3 file`` would; ``finish``: and end as
    the interpreter ends, non-daemon threads joined and atexit functions run (a forked
    program otherwise ends at its last line, and a thread's output is lost)."""
    namespace = {"__name__": "__main__", "__file__": filename, "__builtins__": __builtins__}
    status = 0
    try:
        exec(code, namespace)
    except SystemExit as exc:
        status = exit_status(exc)
    except BaseException as exc:  # noqa: BLE001 - uncaught, printed like Python does
        print_uncaught(exc, exc.__traceback__.tb_next)  # from the program's frame
        status = 1
    if finish:
        try:
            threading = sys.modules.get("threading")
            if threading is not None:
                threading._shutdown()
            import atexit

            atexit._run_exitfuncs()
        except SystemExit as exc:
            status = exit_status(exc)
        except BaseException as exc:  # noqa: BLE001
            print_uncaught(exc, exc.__traceback__)
            status = status or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            status = status or 1
    return status


def print_uncaught(exc, tb):
    """Print an uncaught exception as Python does: through ``sys.excepthook`` (the program
    may have set its own), or the default hook when that one fails."""
    exc = exc.with_traceback(tb)  # the hook prints the exception's own, whatever it is given
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException:  # noqa: BLE001
        sys.__excepthook__(type(exc), exc, tb)


def exit_status(exc):
    """The exit status of an uncaught SystemExit, its message printed as Python prints it."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    sys.stderr.write(f"{exc.code}\n")
    return 1


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
            [sys.executable, "-I", "-c", ZYGOTE_BOOT, PACKAGE_PARENT, str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=slate.WORK_ROOT,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                 "PYTHONDONTWRITEBYTECODE": "1"},
            preexec_fn=zygote_limits, pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.answered = False  # it has answered a message: its start is behind it

    def wait_ready(self, deadline):
        """Wait out the zygote's own start (its imports: up to seconds on a loaded machine),
        which must not count against the first program's time limit."""
        if not self.answered:
            import socket

            socket.send_fds(self.control, [b'{"op": "ready"}'], [])
            self._recv("ready", deadline)

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
            self.answered = True
            if message.get("op") == op and (pid is None or message.get("pid") == pid):
                return message

    def load(self, source, name, cwd, env, deadline):
        """None when the program compiled; else the error text."""
        import socket

        fd = source_fd(source)
        try:
            socket.send_fds(self.control, [json.dumps({
                "op": "load", "name": name, "cwd": cwd, "env": env}).encode()], [fd])
        finally:
            os.close(fd)
        return self._recv("loaded", deadline).get("error")

    def start(self, memory_mb, cpu_s, argv0):
        """Fork the loaded program."""
        return self._fork({"op": "run", "memory_mb": memory_mb, "cpu_s": cpu_s,
                           "argv0": argv0})

    def script(self, source, memory_mb, cpu_s, argv0, cwd, env):
        """Fork a child that compiles and runs ``source`` itself (``run_script``); what was
        loaded stays loaded."""
        fd = source_fd(source)
        try:
            return self._fork({"op": "script", "memory_mb": memory_mb, "cpu_s": cpu_s,
                               "argv0": argv0, "cwd": cwd, "env": env}, [fd])
        finally:
            os.close(fd)

    def _fork(self, request, extra_fds=()):
        """A child with new pipes as its stdin, stdout and stderr, ``extra_fds`` after them."""
        import socket

        fds = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
        theirs = [fds[0][0], fds[1][1], fds[2][1]]
        ours = [fds[0][1], fds[1][0], fds[2][0]]
        try:
            socket.send_fds(self.control, [json.dumps(request).encode()],
                            [*theirs, *extra_fds])
        except OSError:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        try:
            pid = self._recv("started", time.monotonic() + 10)["pid"]
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        return ForkedProcess(self, pid, *ours)

    def serve(self, fds, memory_mb, cwd, env, entry_point, preamble, setup=False):
        """Fork a candidate server (``candidate_server.serve_candidate``) with ``fds`` as its
        descriptors 0-4; as the candidate's uid, in ``cwd``."""
        import socket

        socket.send_fds(self.control, [json.dumps({
            "op": "serve", "memory_mb": memory_mb, "cwd": cwd, "env": env,
            "entry_point": entry_point, "preamble": preamble, "setup": setup}).encode()], fds)
        pid = self._recv("started", time.monotonic() + 10)["pid"]
        return ForkedProcess(self, pid)

    def close(self):
        kill_group(self.process)
        self.process.wait()
        self.control.close()


class ForkedProcess:
    """A zygote's child, with the part of Popen's interface that ``supervise`` uses."""

    def __init__(self, zygote, pid, stdin_fd=None, stdout_fd=None, stderr_fd=None):
        self.zygote, self.pid, self.returncode = zygote, pid, None
        self.stdin = None if stdin_fd is None else os.fdopen(stdin_fd, "wb", buffering=0)
        self.stdout = None if stdout_fd is None else os.fdopen(stdout_fd, "rb", buffering=0)
        self.stderr = None if stderr_fd is None else os.fdopen(stderr_fd, "rb", buffering=0)

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


def source_fd(source):
    """A memory file holding ``source``, at offset 0: a program travels to the zygote as a
    descriptor, never in a message."""
    fd = os.memfd_create("source")
    try:
        data = memoryview(source.encode("utf-8", "surrogatepass"))
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def run_forked(zygote, job, stdin_data, time_limit_s, script_in=None):
    """The loaded program run as a fork of ``zygote``; with ``script_in`` (its work dir and
    environment) ``job["source"]`` runs as a script instead (``Zygote.script``). A result
    with ``started`` False when the zygote could not start it."""
    oom_before = oom_kills()
    started = time.monotonic()
    candidate_started()
    cpu_s, argv0 = math.ceil(time_limit_s) + 1, job["language"]["source"]
    try:
        if script_in is None:
            process = zygote.start(job["memory_mb"], cpu_s, argv0)
        else:
            process = zygote.script(job["source"], job["memory_mb"], cpu_s, argv0, *script_in)
    except (OSError, EOFError, ValueError, KeyError) as exc:
        return {"status": RUNTIME_ERROR, "code": None, "stdout": b"", "started": False,
                "stderr": f"cannot start: {exc}".encode(), "time_ms": 0.0}
    return supervise(process, stdin_data, started, time_limit_s,
                     job["output_limit_bytes"], job["stderr_tail_bytes"], oom_before)


def spawn_zygote():
    try:
        return Zygote()
    except OSError:
        return None
