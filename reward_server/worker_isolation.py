"""What a scoring worker may not do: the least privilege of the host's verifier processes.

The math, ifeval, format and reasoning_gym workers run libraries on text a policy wrote
(SymPy, regex engines, the task scorers), and a plug-in's check is a third party's code
reading a completion; RL searches for whatever that text can make them do. Whatever a
library bug hands an answer, it should find nothing worth having:

- **a fresh interpreter, not a fork of the server**: workers come from a ``forkserver``
  started with an allow-listed environment (``worker_environment``), so no worker holds the
  server's heap (its settings, the API token, the Docker client), its environment or its
  descriptors;
- **files: read-only, only where its code comes from** (``landlock``): the interpreter, the
  packages and the import roots the server loaded from, the system's libraries; not a token
  file, a key, a settings file. It writes only in a directory of its own (its ``TMPDIR``
  and ``HOME``, beneath its pool's ``make_scratch``). This holds for any uid, where the
  kernel offers Landlock (5.13+; logged once where not);
- **no network, no other process's memory, no signal to another process**
  (``syscall_filters``): ``socket``, ``io_uring_setup``, ``ptrace``, ``process_vm_*`` and
  the pidfd calls fail with EPERM, and a signal may go to the worker itself only (a check's
  worker may signal the child it runs each item in). Where root may, a network namespace of
  its own besides;
- **a uid of its own** where the server is root: ``uid_base + pid``, no groups, so not the
  Docker socket, not a file only root reads, and not a neighbour's files either;
- ``no_new_privs``, not dumpable (no core, no ``/proc/<pid>/mem`` for anyone), at most
  ``MAX_PROCESSES`` processes (root only: the limit counts a uid's processes) and
  ``MAX_FILE_BYTES`` a file.

A server that is not root (the shipped image, a pod with ``runAsNonRoot``) shares its uid
with its workers: it makes itself not dumpable (``protect_server``), so a worker cannot
read its environment or memory through ``/proc``, and the filters above keep the rest.
The interpreter and the packages must be readable by any user for a dropped worker to
import them (``unreadable_paths`` says which are not, and the server refuses to start
rather than fail on the first lazy import). ``--worker-isolation off`` keeps workers as
the server's user with none of this, for a trusted setup only.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
import resource
import shutil
import stat
import sys
import sysconfig
import tempfile
import threading
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import NamedTuple

from reward_server import landlock, syscall_filters
from reward_server.libc import PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, last_error, libc, prctl

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

_CLONE_NEWNET, _CLONE_NEWIPC = 0x40000000, 0x08000000

_enabled = True
_start_lock = threading.Lock()
_confined_to: tuple[str, ...] | None = None  # this worker's readable trees, once isolated


def configure(enabled: bool) -> None:
    """The server's ``worker_isolation`` setting, before any pool starts."""
    global _enabled
    _enabled = enabled


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


def code_trees() -> list[str]:
    """What a confined worker may read of the code: the standard library and site-packages
    whole, and elsewhere (a source checkout, a plug-in directory on ``PYTHONPATH``) only the
    top-level packages and modules loaded from there, never the directory that holds them:
    a checkout's root holds ``.env`` (the API token), ``.git``, keys."""
    paths = sysconfig.get_paths()
    whole = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    found = set(whole)
    for name in {name.partition(".")[0] for name in list(sys.modules)}:
        top = sys.modules.get(name)
        file = getattr(top, "__file__", None)
        places = ([os.path.dirname(file)] if file and os.path.basename(file).startswith(
            "__init__.") else [file] if file else list(getattr(top, "__path__", [])))
        for place in places:
            place = os.path.abspath(place)
            if not any(place == w or place.startswith(w + os.sep) for w in whole):
                found.add(place)
    return sorted(found)


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


class Policy(NamedTuple):
    """What a pool's workers are confined to, made in the server (which knows where its
    code was imported from) and handed to each worker at its start."""

    readable: tuple[str, ...]
    signal_others: bool  # a check's worker signals its per-item child; no other does
    scratch: str  # the pool's directory, where each worker gets one of its own to write in


# What a worker reads besides its import roots: the C libraries an extension module loads,
# time zones, the CPU topology numeric libraries ask for, its own /proc entry
_SYSTEM_READABLE = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
                    "/etc/ld.so.cache", "/etc/localtime", "/usr/share/zoneinfo",
                    "/sys/devices/system/cpu", "/dev/urandom")


def policy(scratch: str, signal_others: bool = False) -> Policy | None:
    """The confinement of a pool about to start, whose workers write beneath ``scratch``
    (``make_scratch``); ``None`` with ``--worker-isolation off``."""
    if not _enabled:
        return None
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    readable = sorted({*code_trees(), *prefixes, *_SYSTEM_READABLE})
    return Policy(tuple(readable), signal_others, scratch)


def make_scratch(name: str) -> str:
    """A pool's scratch directory: libraries want a writable temporary directory (at import,
    matplotlib under reasoning-gym's tasks), and a worker may write nowhere else. Each
    worker makes its own beneath it (sticky, so no worker removes another's); the pool
    removes it all when it closes."""
    path = tempfile.mkdtemp(prefix=f"reward-{name}-")
    os.chmod(path, 0o1733)
    return path


def _own_scratch(scratch: str, uid: int | None) -> str:
    """This worker's directory beneath the pool's, made private to it (``uid``: the one it
    drops to), once the directories of workers that are gone are removed."""
    for entry in os.listdir(scratch):
        if entry.isdigit() and not os.path.exists(f"/proc/{entry}"):
            shutil.rmtree(os.path.join(scratch, entry), ignore_errors=True)
    own = os.path.join(scratch, str(os.getpid()))
    shutil.rmtree(own, ignore_errors=True)  # a pid's earlier worker's
    os.mkdir(own, 0o700)
    if uid is not None:
        os.chown(own, uid, uid)
    for variable in ("TMPDIR", "HOME"):  # what libraries write beneath
        os.environ[variable] = own
    tempfile.tempdir = own
    return own


def confined_to() -> tuple[str, ...] | None:
    """The trees this worker may read (its own /proc entry and directory aside), for a
    process of its that may read less; ``None`` where it is not confined."""
    return _confined_to


def protect_server() -> None:
    """A server that is not root shares its uid with its workers: not dumpable, its
    ``/proc/<pid>/environ``, ``mem`` and ``fd`` are root's, so a worker cannot read the
    token there. (A root server's workers have a uid of their own.)"""
    if _enabled and os.geteuid() != 0:
        prctl(PR_SET_DUMPABLE, 0)


def isolate(confinement: Policy | None) -> None:
    """Called first in each worker (``process_pool``'s initializer). ``confinement`` comes
    with the worker's start: the forkserver's own copy of this module never saw
    ``configure``."""
    if confinement is None:
        return
    root = os.geteuid() == 0
    if root:
        # no network, and none of the host's SysV IPC objects or POSIX queues
        if libc().unshare(_CLONE_NEWNET | _CLONE_NEWIPC) != 0:  # no CAP_SYS_ADMIN (a container)
            _warn_once(f"no network or IPC namespace for scoring workers (unshare: "
                       f"{last_error()}); sockets and IPC are refused by seccomp")
        resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES, MAX_PROCESSES))
    else:
        _warn_once("the server is not root: its scoring workers share its uid, confined by "
                   "Landlock and seccomp (reward_server/worker_isolation.py)")
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.chdir("/")  # the server's directory may be its user's only
    del sys.argv[1:]  # the server's command line came with it: a flag may hold a secret
    uid = UID_BASE + os.getpid() if root else None
    own = _own_scratch(confinement.scratch, uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # Landlock needs it, for root too once dropped
    why_not = landlock.restrict([*confinement.readable, "/proc/self"], ["/dev/null"], [own])
    global _confined_to
    _confined_to = confinement.readable
    if why_not is not None:
        _warn_once(f"scoring workers may read and write any file their uid may ({why_not})")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    prctl(PR_SET_DUMPABLE, 0)
    syscall_filters.install(
        syscall_filters.WORKER_DENIED,
        signal_targets=None if confinement.signal_others else [os.getpid()])


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)
