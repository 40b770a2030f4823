"""The Python fork server ("zygote"). Starting an interpreter costs ~25 ms per test; forking a
warm one costs ~1 ms.

The zygote is a fresh interpreter started before any job is known, and it stays that way:
it never reads anything of a caller's. A program's source comes as a descriptor that only a
child of it reads: a *loader* (``load``), forked per execution, which compiles the program
and forks one child per test until the execution ends (``unload``) and its memory with it;
or a snippet's own child (``run_script``). A test's input and output go through pipes it
only passes on. So a program forked from it, whoever's, finds no earlier program, source,
test or result in its frames, heap or raw memory (tests/sandbox/test_fork_server.py).
Each child takes its pipes as stdin/stdout/stderr, drops to the candidate's uid, lowers its
limits and runs the program as ``__main__``; the zygote (or the loader) reports its pid and,
later, its wait status. Both keep root (their children drop it), so no candidate can reach
them.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
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
from .pymain import run_as_main, run_script
from .statuses import RUNTIME_ERROR

ZYGOTE_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from harness import zygote; "
               "zygote.zygote_main(int(sys.argv[2]))")
ZYGOTE_MEMORY_MB = 1024


class _Role:
    """Whether this process is the container's zygote, the one that forks testers (PID 1
    asks it). A tester's own fork server, which the test code drives, only forks candidate
    servers (``serve``): its loader would compile, as root, a file the test code names, and
    a compile error's traceback quotes the file's lines."""

    main = False


def zygote_main(control_fd):
    """Runs in the zygote: control messages on ``control_fd`` (a Unix socket)."""
    # imported once here: a forked candidate server or tester starts warm
    from . import candidate_server, tester  # noqa: F401
    from .asserts import run_asserts  # noqa: F401

    make_undumpable()  # its children inherit this: none can be traced by another
    _Role.main = True
    serve_control(socket.socket(fileno=control_fd), None)


def serve_control(control, program):
    """The zygote's loop (``program`` None), or a loader's (``program``: the compiled code, None
    if it did not compile, and its work dir), which ends at ``unload``. Each message is
    handled in a call of its own: what it held is gone when the next child forks."""
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 5)
        except OSError:
            return
        if not message or not handle(control, json.loads(message), fds, program):
            return


def handle(control, request, fds, program):
    """One control message; False when it ends the loop (a loader's ``unload``)."""
    op = request["op"]
    if op == "ready":
        control.sendall(b'{"op": "ready"}')
    elif op == "load" and program is None and _Role.main:
        load(control, request, fds)
    elif op == "unload" and _Role.main:  # nothing loaded here: its loader said so as it ended
        return program is None
    elif (op in ("load", "unload") or (op == "run" and (program is None or program[0] is None))
          or (op == "tester" and program is not None) or (not _Role.main and op != "serve")):
        close_all(fds)  # one program per loader; the zygote runs none
        control.sendall(json.dumps({"op": "loaded" if op == "load" else "started",
                                    "error": f"cannot {op} here"}).encode())
    else:
        fork_child(control, request, fds, program)
    return True


def load(control, request, fds):
    """Fork a loader, which compiles the program from its descriptor (the zygote never reads
    it) and forks each test's child from it until ``unload``. When the loader has ended,
    however it ended, the zygote says ``unloaded``: exactly once per load."""
    pid = os.fork()
    if pid == 0:
        try:
            os.environ.update(request["env"])  # its tests': never the zygote's
            try:
                with os.fdopen(fds[0], "rb") as f:
                    code = compile(f.read(), request["name"], "exec")
                reply = {"op": "loaded", "pid": os.getpid()}
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                import traceback

                code = None
                reply = {"op": "loaded", "pid": os.getpid(),
                         "error": traceback.format_exc(limit=0)}
            control.sendall(json.dumps(reply).encode())
            serve_control(control, (code, request["cwd"]))
        finally:
            os._exit(0)
    close_all(fds)
    os.waitpid(pid, 0)
    control.sendall(b'{"op": "unloaded"}')


def fork_child(control, request, fds, program):
    """A child of the zygote (a snippet's, a candidate server) or of a loader (a test's run of
    its program), reported ``started`` and, when it has ended, ``exited``."""
    pid = os.fork()
    if pid == 0:  # the child: becomes the program
        status = 1
        try:
            status = become_program(request, fds, program)
        finally:
            os._exit(status)
    close_all(fds)
    control.sendall(json.dumps({"op": "started", "pid": pid}).encode())
    _, wait_status = os.waitpid(pid, 0)
    control.sendall(json.dumps({"op": "exited", "pid": pid, "status": wait_status}).encode())


def become_program(request, fds, program):
    """In a forked child: its descriptors, its own session, the candidate's uid, then the job
    of ``request["op"]``; its exit status."""
    import io

    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(len(fds), 65536)
        if request["op"] == "tester":  # an assertion job's test process: drops to its own uid
            from .tester import serve_tester

            serve_tester(3)
            return 0
        slate.drop_privileges()
        if request["op"] == "script":  # a snippet (run_code): its own source
            return run_script(request)
        if request["op"] == "serve":  # an assertion job's candidate server
            from . import candidate_server

            os.chdir(request["cwd"])
            os.environ.update(request["env"])
            apply_limits(request["memory_mb"], None)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w"), encoding="utf-8",
                                          write_through=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w"), encoding="utf-8",
                                          write_through=True)
            candidate_server.serve_candidate(request["entry_point"], request["preamble"],
                                             request["setup"])
            return 0
        code, cwd = program
        os.chdir(cwd)
        apply_limits(request["memory_mb"], request["cpu_s"])
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r")), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w")), encoding="utf-8")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w"), encoding="utf-8", write_through=True)
        sys.argv = [request["argv0"]]
        return run_as_main(code, request["argv0"])
    except BaseException:  # noqa: BLE001
        return 1


def close_all(fds):
    for fd in fds:
        os.close(fd)


def zygote_limits():
    """The fork server's preexec_fn: its own session and memory cap; it keeps root (its
    children drop it), so no candidate can reach it."""
    os.setsid()
    apply_limits(ZYGOTE_MEMORY_MB, None)


class Zygote:
    """The harness's handle on a fork server."""

    def __init__(self):
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
        self.loader = None  # the pid of the loader of this execution's program, if any
        self.loaded = False  # a loader was asked for and has not been reported gone

    def wait_ready(self, deadline):
        """Wait out the zygote's own start (its imports: up to seconds on a loaded machine),
        which must not count against the first program's time limit."""
        if not self.answered:
            socket.send_fds(self.control, [b'{"op": "ready"}'], [])
            self._recv("ready", deadline)

    def alive(self):
        """Running and not stopped (a program may have sent it SIGSTOP), and so is the loader
        of the loaded program, if one is (the OOM killer may take it)."""
        if self.process.poll() is not None:
            return False
        return running(self.process.pid) and (self.loader is None or running(self.loader))

    def _recv(self, op, deadline, pid=None, ends_load=False):
        """The next message ``op`` (for ``pid``); older messages, such as the exit of a
        program the sweep killed, are skipped. ``ends_load``: OSError if the loader ends
        first."""
        while True:
            self.control.settimeout(max(0.001, deadline - time.monotonic()))
            data = self.control.recv(1 << 20)
            if not data:
                raise EOFError
            message = json.loads(data)
            self.answered = True
            if message.get("op") == "unloaded":
                self.loaded, self.loader = False, None
                if ends_load:
                    raise OSError("the loader ended")
            if message.get("op") == op and (pid is None or message.get("pid") == pid):
                return message

    def load(self, source, name, cwd, env, deadline):
        """Fork a loader of ``source``, which ``start`` forks from until ``unload``. None when
        the program compiled; else the error text."""
        fd = source_fd(source)
        try:
            self.loaded = True
            socket.send_fds(self.control, [json.dumps({
                "op": "load", "name": name, "cwd": cwd, "env": env}).encode()], [fd])
        finally:
            os.close(fd)
        reply = self._recv("loaded", deadline, ends_load=True)
        self.loader = reply.get("pid")
        return reply.get("error")

    def unload(self, deadline):
        """End the loader, and the program's memory with it: the zygote is as it started. On
        any failure the zygote is killed (and replaced after this execution: serve.py)."""
        try:
            if self.loaded:
                self.control.sendall(b'{"op": "unload"}')
            while self.loaded:
                self._recv("unloaded", deadline)
        except (OSError, EOFError, ValueError):  # TimeoutError is an OSError
            kill_group(self.process)
            self.loaded, self.loader = False, None

    def start(self, memory_mb, cpu_s, argv0):
        """Fork the loaded program."""
        return self._fork({"op": "run", "memory_mb": memory_mb, "cpu_s": cpu_s,
                           "argv0": argv0})

    def script(self, source, memory_mb, cpu_s, argv0, cwd, env):
        """Fork a child that compiles and runs ``source`` itself (``run_script``)."""
        fd = source_fd(source)
        try:
            return self._fork({"op": "script", "memory_mb": memory_mb, "cpu_s": cpu_s,
                               "argv0": argv0, "cwd": cwd, "env": env}, [fd])
        finally:
            os.close(fd)

    def _fork(self, request, extra_fds=()):
        """A child with new pipes as its stdin, stdout and stderr, ``extra_fds`` after them."""
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
            pid = started(self._recv("started", time.monotonic() + 10))
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        return ForkedProcess(self, pid, *ours)

    def serve(self, fds, memory_mb, cwd, env, entry_point, preamble, setup=False):
        """Fork a candidate server (``candidate_server.serve_candidate``) with ``fds`` as its
        descriptors 0-4; as the candidate's uid, in ``cwd``."""
        socket.send_fds(self.control, [json.dumps({
            "op": "serve", "memory_mb": memory_mb, "cwd": cwd, "env": env,
            "entry_point": entry_point, "preamble": preamble, "setup": setup}).encode()], fds)
        return ForkedProcess(self, started(self._recv("started", time.monotonic() + 10)))

    def tester(self, relay_fd):
        """Fork an assertion job's test process (``tester.serve_tester``), ``relay_fd`` its
        fd 3; /dev/null its stdin, stdout and stderr."""
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            socket.send_fds(self.control, [b'{"op": "tester"}'],
                            [devnull, devnull, devnull, relay_fd])
        finally:
            os.close(devnull)
        return ForkedProcess(self, started(self._recv("started", time.monotonic() + 10)))

    def close(self):
        kill_group(self.process)
        self.process.wait()
        self.control.close()


class ForkedZygote(Zygote):
    """A fork server forked from this process (the zygote's loop, run by its child), for a
    process that is about to drop root and must still start programs as the candidate."""

    def __init__(self, control, pid):
        self.control, self.process = control, _Child(pid)
        self.answered, self.loader, self.loaded = True, None, False

    @classmethod
    def fork(cls):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                _Role.main = False
                serve_control(theirs, None)
            finally:
                os._exit(0)
        theirs.close()
        return cls(ours, pid)


class _Child:
    """A child process by its pid, with the part of Popen's interface the zygote's handle
    uses (it may not be signalled: it keeps root)."""

    def __init__(self, pid):
        self.pid, self.returncode = pid, None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        return self.poll()

    def kill(self):
        pass


class ForkedProcess:
    """A zygote's child, with the part of Popen's interface that ``supervise`` uses."""

    def __init__(self, zygote, pid, stdin_fd=None, stdout_fd=None, stderr_fd=None):
        self.zygote, self.pid, self.returncode = zygote, pid, None
        self.parent = zygote.loader  # None: the zygote's own child
        self.stdin = None if stdin_fd is None else os.fdopen(stdin_fd, "wb", buffering=0)
        self.stdout = None if stdout_fd is None else os.fdopen(stdout_fd, "rb", buffering=0)
        self.stderr = None if stderr_fd is None else os.fdopen(stderr_fd, "rb", buffering=0)

    def poll(self):
        if self.returncode is None:
            try:
                reply = self.zygote._recv("exited", time.monotonic(), self.pid)
            except TimeoutError:  # and if its loader is gone, no one will say it exited
                if self.parent is None or running(self.parent):
                    return None
                return self._poll_orphan()
            except (OSError, EOFError, ValueError):
                return self._poll_orphan()  # the program killed the zygote
            self.returncode = os.waitstatus_to_exitcode(reply["status"])
        return self.returncode

    def _poll_orphan(self):
        """With its parent (the zygote, the loader) gone, its child is re-parented to us
        (PID 1): wait for it here."""
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
        except (ProcessLookupError, PermissionError):  # a tester's: PID 1 kills (KILLER)
            pass


def running(pid):
    """``pid`` exists and is neither stopped nor a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("T", "t", "Z")
    except OSError:
        return False


def started(reply):
    """The pid of a ``started`` reply; OSError when the fork server refused."""
    if reply.get("error"):
        raise OSError(reply["error"])
    return reply["pid"]


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
