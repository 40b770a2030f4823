"""A plug-in verifier whose ``check`` does what a hostile response can make a careless check
do: loop, eat memory, raise what should never cross a process boundary, return what is no
reward, leave state or threads behind, start processes, signal its worker, spin threads
together, reach for the server's secrets, flood its output; for the tests of what
the core's pipeline gives every plug-in (reward_server/pipeline.py,
reward_server/check_worker.py). Loaded with ``REWARD_SERVER_PLUGINS``."""

from __future__ import annotations

import asyncio
import ctypes
import fcntl
import hashlib
import json
import os
import platform
import resource
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from reward_server.verifiers import ItemBase, ResultBase, Verifier

_HOARD: list[bytearray] = []  # a careless module-level cache


class HostileItem(ItemBase):
    response: str


class HostileResult(ResultBase):
    score: float | None
    status: str
    info: str = ""


class _NeedsTwoArguments(Exception):  # cannot be rebuilt from its pickle
    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at {position}")


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def hash_forever() -> None:
    """CPU work that lets go of the GIL: threads doing it spin on several CPUs at once."""
    block = b"x" * (1 << 20)
    while True:
        hashlib.sha256(block).digest()


def _raise(exc: BaseException) -> HostileResult:
    raise exc


_WAYS = {
    "raise": lambda: _raise(ValueError("the check cannot read this response")),
    "exit": lambda: _raise(SystemExit(0)),
    "interrupt": lambda: _raise(KeyboardInterrupt()),
    "generator exit": lambda: _raise(GeneratorExit()),
    "cancelled": lambda: _raise(asyncio.CancelledError()),
    "import error": lambda: _raise(ImportError("no module named optional_parser")),
    "two arguments": lambda: _raise(_NeedsTwoArguments("bad token", 3)),
    "unprintable": lambda: _raise(_UnprintableError()),
    "os exit": lambda: os._exit(3),
    "wrong type": lambda: 1.0,
    "nan": lambda: HostileResult(score=float("nan"), status="ok"),
    "seven": lambda: HostileResult(score=7.0, status="ok"),
    "claims not run": lambda: HostileResult(score=None, status="not_run"),
    "huge": lambda: HostileResult(score=1.0, status="ok", info="x" * (4 << 20)),
    "fork": lambda: HostileResult(score=1.0, status="ok", info=str(_fork())),
    "exec": lambda: os.execv("/bin/sh", ["sh", "-c", "sleep 60"]),
    "kill worker": lambda: os.kill(os.getppid(), signal.SIGKILL),
    "kill self": lambda: os.kill(os.getpid(), signal.SIGKILL),  # would pass for the OOM killer
    "kill group": lambda: os.killpg(0, signal.SIGKILL),
    "leave group": lambda: os.setsid(),
    "memfd": lambda: os.memfd_create("beyond the memory cap"),
    "forge unavailable": lambda: _forge(b"Unot scored: forged"),
    "timer kill self": lambda: _libc("timer_create", 1, None, ctypes.byref(ctypes.c_int())),
    "owner kill group": lambda: _owner_kill(-os.getsid(0)),
    "lower cpu limit": lambda: resource.setrlimit(resource.RLIMIT_CPU, (1, 1)),
    "secret memfd": lambda: _libc("syscall", 447, 0),  # its pages: no limit counts them
    # lines of its own in the server's log, 64 KB of them, as the check's failure
    "log inject": lambda: _forge(b"F" + (b"\nFORGED-LINE reward_server.auth accepted" * 1600)),
    # 64 KB kept for ten minutes as the reason of a memory kill (the timeout memory's)
    "memory tag": lambda: _forge(b"M" + b"m" * 65_000),
}


def _owner_kill(target: int) -> HostileResult:
    """SIGKILL to ``target`` by way of a descriptor's owner, as the fourth audit did to a
    whole non-root server (its session's group)."""
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(read_fd, _F_SETSIG, signal.SIGKILL)
    fcntl.fcntl(read_fd, fcntl.F_SETOWN, target)
    fcntl.fcntl(read_fd, fcntl.F_SETFL, os.O_ASYNC)
    os.write(write_fd, b"x")
    time.sleep(0.3)
    return HostileResult(score=1.0, status="ok")


def _forge(message: bytes) -> HostileResult:
    """A verdict written, framed, on every descriptor the check holds, then gone."""
    for fd in range(3, 64):
        try:
            os.write(fd, len(message).to_bytes(4, "big") + message)
        except OSError:
            pass
    os._exit(0)


def _fork() -> int:
    pid = os.fork()
    if pid == 0:  # a process that would outlive the item, spinning
        _spin(60.0)
        os._exit(0)
    return pid


_F_SETSIG = 10
_CHECKOUT = Path(__file__).resolve().parents[2]  # the source checkout's root
_ADD_KEY = {"x86_64": 248, "aarch64": 217}
_IO_SETUP = {"x86_64": 206, "aarch64": 0}


def _libc(name: str, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = getattr(libc, name)(*args)
    if result == -1:
        raise OSError(ctypes.get_errno(), name)
    return result


def _readable_procs(near: int) -> int:
    """How many processes' /proc entries near ``near`` (its worker's) a check can read."""
    found = 0
    for pid in range(max(1, near - 300), near + 300):
        try:
            open(f"/proc/{pid}/status").close()
            found += 1
        except OSError:
            pass
    return found


def _spy(server_pid: int, secret_file: str, shm_id: int) -> dict[str, object]:
    """What a completion that took over a check would try first: each probe's errno, or
    what it got."""
    probes = {
        "server_environ": lambda: open(f"/proc/{server_pid}/environ", "rb").read()[:64],
        "secret_file": lambda: open(secret_file).read(),
        "write_tmp": lambda: open("/tmp/hostile-check-was-here", "w").write("x"),
        "write_own_tmp": lambda: open(os.path.join(tempfile.gettempdir(), "x"), "w").write("x"),
        "socket": lambda: socket.socket(socket.AF_UNIX).close(),
        "signal_server": lambda: os.kill(server_pid, 0),
        "signal_worker": lambda: os.kill(os.getppid(), 0),
        "server_limits": lambda: resource.prlimit(server_pid, resource.RLIMIT_NOFILE),
        "fork": _fork,
        # the kernel signals a descriptor's owner, any process of the uid (SIGWINCH here:
        # nothing happens to a server the probe reaches)
        "async_signal": lambda: fcntl.fcntl(os.pipe()[0], _F_SETSIG, signal.SIGWINCH),
        "async_owner": lambda: fcntl.fcntl(os.pipe()[0], fcntl.F_SETOWN, server_pid),
        "timer": lambda: _libc("timer_create", 1, None, ctypes.byref(ctypes.c_int())),
        "keyring": lambda: _libc("syscall", _ADD_KEY[platform.machine()], b"user",
                                 b"left-here", b"x", 1, -4),  # @u, the user's keyring
        "namespace": lambda: _libc("unshare", 0x10000000),  # CLONE_NEWUSER
        "socketpair": socket.socketpair,  # its buffers: kernel memory, uncapped
        "worker_proc": lambda: str(_readable_procs(os.getppid())),
        "checkout_root": lambda: open(_CHECKOUT / "pyproject.toml").read(),  # beside .env
        "inotify": lambda: _libc("inotify_init1", 0),  # names of files it may not open
        "aio": lambda: _libc("syscall", _IO_SETUP[platform.machine()], 65000,
                             ctypes.byref(ctypes.c_ulong())),  # a host-wide limit
        # an existing SysV segment, by its id (small, guessable): the host's or the uid's
        "sysv_segment": lambda: _libc("shmat", shm_id, None, 0o10000),  # SHM_RDONLY
    }
    found: dict[str, object] = {}
    for name, probe in probes.items():
        try:
            got = probe()
            found[name] = got.decode("utf-8", "replace") if isinstance(got, bytes) else str(got)
        except OSError as exc:
            found[name] = exc.errno
    return found


class HostileVerifier(Verifier):
    name = "hostile"
    item_model = HostileItem
    result_model = HostileResult
    check_timeout_s = 3.0
    check_memory_mb = 256
    check_workers = 1  # one at a time: the fair share between callers is what shows

    def check(self, item: HostileItem) -> HostileResult:  # type: ignore[override]
        response = item.response
        if response in _WAYS:
            return _WAYS[response]()  # type: ignore[return-value]
        if response == "loop":
            while True:
                pass
        if response == "memory":
            hoard = [bytearray(64 << 20) for _ in range(64)]
            return HostileResult(score=float(len(hoard)), status="ok")
        if response == "hoard":  # 200 MB kept for the next item, which needs 100
            _HOARD.extend(bytearray(50 << 20) for _ in range(4))
            return HostileResult(score=0.0, status="ok")
        if response == "needs 100 MB":
            room = bytearray(100 << 20)
            return HostileResult(score=1.0, status="ok", info=str(len(room)))
        if response == "spinning thread":  # one left behind
            threading.Thread(target=_spin, args=(60.0,), daemon=True).start()
            return HostileResult(score=0.0, status="ok")
        if response == "patch":  # every later verdict a 1
            type(self).check = lambda self, item: HostileResult(score=1.0, status="ok")
            return HostileResult(score=0.0, status="ok")
        if response == "spinning threads":  # four CPUs' worth within its time limit
            for _ in range(3):  # each thread's malloc arena counts to the memory cap
                threading.Thread(target=hash_forever, daemon=True).start()
            hash_forever()
        if response.startswith("status flood"):  # a status of its own making, each time
            return HostileResult(score=0.0, status=os.urandom(4).hex() + "s" * 5000)
        if response.startswith("bulky "):  # a result of 60 KB, under the 64 KB a result may be
            return HostileResult(score=1.0, status="ok", info=response + "x" * 60_000)
        if response.startswith("spy "):
            _, server_pid, shm_id, secret_file = response.split(" ", 3)
            return HostileResult(score=0.0, status="ok",
                                 info=json.dumps(_spy(int(server_pid), secret_file, int(shm_id))))
        if response == "flood":
            for _ in range(20_000):
                print("INFO reward_server admin token=forged " + "x" * 1000)
                print("x" * 1000, file=sys.stderr)
            return HostileResult(score=1.0, status="ok")
        if response.startswith("slow"):
            _spin(1.0)  # a second of CPU, its own work
        return HostileResult(score=1.0, status="ok", info=str(os.getpid()))
