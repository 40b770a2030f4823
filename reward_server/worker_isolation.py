"""What a scoring worker may not do: the least privilege of the host's verifier processes.

The math, ifeval, format and reasoning_gym workers run libraries on text a policy wrote
(SymPy, regex engines, the task scorers), and RL searches for whatever that text can make
them do. Whatever a library bug hands an answer, it should find nothing worth having:

- **a fresh interpreter, not a fork of the server**: workers come from a ``forkserver``
  started with an allow-listed environment (``worker_environment``), so no worker holds the
  server's heap (its settings, the API token, the Docker client), its environment or its
  descriptors;
- **a uid of its own**: ``uid_base + pid``, no groups. Not root, so not the Docker socket,
  not a file only root reads (a token file, TLS keys), not ``ptrace``/``kill`` of the server;
  and not shared with any other worker, so not ``kill`` of a neighbour either;
- **no network**: a network namespace of its own where the kernel lets root make one (no
  interface but a loopback that is down), and in every case a seccomp filter that answers
  ``socket`` and ``io_uring_setup`` with EPERM, so a container without ``CAP_SYS_ADMIN``
  (the compose stack) keeps the rule;
- ``no_new_privs``, not dumpable (no core, no ``/proc/<pid>/mem`` for anyone), at most
  ``MAX_PROCESSES`` processes and ``MAX_FILE_BYTES`` a file.

All of it needs root at the worker's start; a server that is not root has nothing to drop
and its workers run as its own user (logged once). The interpreter and the packages must be
readable by any user for the dropped worker to import them (``unreadable_paths`` says
which are not, and the server refuses to start rather than fail on the first lazy import).
``--worker-isolation off`` keeps workers as the server's user, for a trusted setup only.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import platform
import re
import resource
import stat
import struct
import sys
import sysconfig
import threading
from multiprocessing.context import BaseContext
from pathlib import Path

log = logging.getLogger("reward_server.workers")

UID_BASE = 1_900_000_000  # + the worker's pid: above any account, below the kernel's 2**32-1
MAX_PROCESSES = 64  # threads count too; its uid is its own, so these are its own
MAX_FILE_BYTES = 64 * 1024 * 1024
# The environment a worker starts with: what the interpreter and numeric libraries read, no
# credential (REWARD_SERVER_API_TOKEN, DOCKER_*, a cloud key) and no settings file's path
_ALLOWED_ENV = re.compile(
    r"(PATH|LANG|LANGUAGE|TZ|TMPDIR|PYTHONPATH|PYTHONHASHSEED|PYTHONIOENCODING"
    r"|PYTHONDONTWRITEBYTECODE|PYTHONUNBUFFERED|LC_[A-Z]+|[A-Z]+_NUM_THREADS"
    r"|SYMPY_[A-Z_]+|MPMATH_[A-Z_]+)")
# Imported by the forkserver before it forks any worker, so a worker (and a replacement for
# one killed at its timeout) starts with them loaded; a missing one is skipped
_PRELOAD = ["reward_server.process_pool", "sympy", "latex2sympy2_extended", "math_verify"]

_CLONE_NEWNET = 0x40000000
_PR_SET_NO_NEW_PRIVS, _PR_SET_DUMPABLE, _PR_SET_SECCOMP = 38, 4, 22
_SECCOMP_MODE_FILTER = 2
# (audit arch, socket, io_uring_setup) per machine
_SYSCALLS = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}
_EPERM = 1

_enabled = True
_start_lock = threading.Lock()


def configure(enabled: bool) -> None:
    """The server's ``worker_isolation`` setting, before any pool starts."""
    global _enabled
    _enabled = enabled


def enabled() -> bool:
    return _enabled


def worker_environment(environ: dict[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ``."""
    return {k: v for k, v in environ.items() if _ALLOWED_ENV.fullmatch(k)}


def context() -> BaseContext:
    """The multiprocessing context every scoring pool forks its workers from: a forkserver
    started, once, with ``worker_environment`` of ours (a forkserver inherits the
    environment at its start, and each worker the forkserver's)."""
    ctx = multiprocessing.get_context("forkserver")
    with _start_lock:
        from multiprocessing import forkserver

        if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:
            ctx.set_forkserver_preload(_PRELOAD)
            saved = dict(os.environ)
            try:
                os.environ.clear()
                os.environ.update(worker_environment(saved))
                forkserver.ensure_running()
            finally:
                os.environ.clear()
                os.environ.update(saved)
    return ctx


def import_roots() -> tuple[list[str], list[str]]:
    """Where a worker imports from: the roots it cannot do without (the standard library,
    site-packages, this package's), and the others a loaded module came from (a plug-in's
    directory, a test's)."""
    paths = sysconfig.get_paths()
    essential = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    essential.add(str(Path(__file__).resolve().parent.parent))  # an editable install's
    entries = sorted({os.path.abspath(p) for p in sys.path if p}, key=len, reverse=True)
    others = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file:
            file = os.path.abspath(file)
            root = next((e for e in entries if file.startswith(e + os.sep)), None)
            if root is not None:
                (essential if name.partition(".")[0] == __package__ else others).add(root)
    return sorted(essential), sorted(others - essential)


def unreadable_paths(paths: list[str] | None = None) -> list[str]:
    """The ``paths`` (the essential import roots by default) that a user other than the
    owner cannot reach: a directory on the way without the others' execute bit, or the root
    itself without their read bit."""
    bad = []
    for entry in paths if paths is not None else import_roots()[0]:
        if not entry or not os.path.exists(entry):
            continue
        path = Path(entry).resolve()
        for parent in [*reversed(path.parents), path]:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH or (parent == path and not mode & stat.S_IROTH):
                bad.append(str(parent))
                break
    return sorted(set(bad))


def check_installation() -> None:
    """``RuntimeError`` naming the fix where workers would drop to a uid that cannot read
    the interpreter, site-packages or this package (a virtualenv under a private home). A
    plug-in's directory they cannot read is logged: a task of a pool whose code lives there
    comes back ``unavailable`` (``process_pool``), never a score."""
    if not _enabled or os.geteuid() != 0:
        return
    bad = unreadable_paths()
    if bad:
        raise RuntimeError(
            "scoring workers run as an unprivileged user, which cannot read "
            f"{', '.join(bad)}: install the server where any user may read it, or make "
            "those directories traversable (chmod o+x), or run with --worker-isolation off "
            "(a trusted setup only: workers then run as root)")
    hidden = unreadable_paths(import_roots()[1])
    if hidden:
        _warn_once("scoring workers cannot import from " + ", ".join(hidden)
                   + " (a plug-in there that scores in a worker pool gets 'unavailable')")


def isolate(enabled: bool) -> None:
    """Called first in each worker (``process_pool``'s initializer), as root. ``enabled``
    comes with the worker's start: the forkserver's own copy of this module never saw
    ``configure``."""
    if not enabled:
        return
    if os.geteuid() != 0:
        _warn_once("the server is not root: its scoring workers run as its own user")
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:  # no CAP_SYS_ADMIN (a container): seccomp holds
        _warn_once("no network namespace for scoring workers (unshare: "
                   f"{os.strerror(ctypes.get_errno())}); sockets are refused by seccomp")
    resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES, MAX_PROCESSES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.chdir("/")  # the server's directory may be its user's only
    uid = UID_BASE + os.getpid()
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _prctl(libc, _PR_SET_DUMPABLE, 0)
    _prctl(libc, _PR_SET_NO_NEW_PRIVS, 1)
    _deny_sockets(libc)


def _prctl(libc: ctypes.CDLL, option: int, value: int) -> None:
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _deny_sockets(libc: ctypes.CDLL) -> None:
    """A seccomp filter: ``socket`` and ``io_uring_setup`` fail with EPERM, a syscall of
    another architecture (``int 0x80``) kills the process, everything else is allowed."""
    arch = _SYSCALLS.get(platform.machine())
    if arch is None:
        raise OSError(f"no seccomp filter for {platform.machine()}")
    audit_arch, nr_socket, nr_io_uring = arch
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    allow, kill, errno = 0x7FFF0000, 0x80000000, 0x00050000 | _EPERM
    program = [
        (ld_w_abs, 0, 0, 4),  # seccomp_data.arch
        (jeq_k, 1, 0, audit_arch),
        (ret_k, 0, 0, kill),
        (ld_w_abs, 0, 0, 0),  # seccomp_data.nr
        (jeq_k, 2, 0, nr_socket),
        (jeq_k, 1, 0, nr_io_uring),
        (ret_k, 0, 0, allow),
        (ret_k, 0, 0, errno),
    ]
    code = b"".join(struct.pack("HBBI", *op) for op in program)
    buffer = ctypes.create_string_buffer(code)
    prog = _Filter(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)
