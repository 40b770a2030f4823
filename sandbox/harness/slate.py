"""A clean slate between executions: standard library only, runs in the container.

The harness (PID 1) runs as root with four capabilities (SETUID, SETGID, KILL, CHOWN) and
every program it starts drops to ``CANDIDATE`` first, so no candidate process can signal,
``prlimit`` or trace the harness or its fork server. After each execution:

1. ``sweep`` (as root) freezes and kills every process but the harness and its fork server;
2. ``janitor`` takes the candidate's effective uid and empties every place that uid can write
   (the work dir and ``SHARED_DIRS``) and removes its SysV IPC objects:
   as the owner it can chmod a mode-000 directory back and remove it, and it can remove only
   what the candidate could have made;
3. ``Slate.problems`` (as root) checks the result against the container's state when it was
   fresh: no process, every writable place empty, the tmpfs blocks free, no SysV object,
   memory back to the fresh level, the harness's and fork server's limits unchanged. Any
   problem makes the container "dirty", and the server replaces it before reuse.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import signal
import stat
import time

CANDIDATE = (10001, 10001)  # uid, gid of every program; the harness is root
# An assertion job's test code (a caller's) runs under a uid of its own, with no capability:
# it reaches neither the harness nor the next caller's job (sandbox/harness/tester.py)
TESTER = (10003, 10003)
WORK_ROOT = "/work"
# World-writable places besides the work dir (gVisor mounts a tmpfs on /tmp, runc keeps it
# read-only); tests/sandbox/test_clean_slate.py checks a program can write nowhere else.
SHARED_DIRS = ("/dev/shm", "/dev/mqueue", "/tmp")
IPC_RMID = 0
MEMORY_SLACK_BYTES = 64 * 1024 * 1024  # harness heap growth we tolerate before replacing
JANITOR_TIMEOUT_S = 10.0
KEPT_ROOT = "/checkers"  # the pool's tmpfs of kept checkers (checker.CACHE_ROOT)


def isolated():
    """True when programs can run under another uid than the harness's."""
    return os.geteuid() == 0


def drop_privileges(who=CANDIDATE):
    """In a child, before it runs anything of the candidate's: the candidate's uid and gid, no
    supplementary groups. Leaving root clears every capability."""
    if os.geteuid() != 0:
        return
    uid, gid = who
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


# --- processes ---------------------------------------------------------------------------------


def other_processes(exclude=()):
    me = os.getpid()
    return [int(name) for name in os.listdir("/proc")
            if name.isdigit() and int(name) not in (1, me, *exclude)]


def sweep(keep=()):
    """Kill every process of this container but init, ourselves and ``keep``."""
    kill_all(lambda: other_processes(exclude=keep))


def processes_of(uid):
    """The processes running under ``uid`` (real, effective, saved or file-system), zombies
    included: a zombie holds its pid, which the container's pids limit counts, until reaped."""
    found = []
    for pid in other_processes():
        try:
            with open(f"/proc/{pid}/status") as f:
                uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
        except (OSError, StopIteration):
            continue  # it exited meanwhile
        if str(uid) in uids:
            found.append(pid)
    return found


def kill_user(uid):
    """Kill every process of ``uid``, whatever session or process group it moved to (a
    program's ``setsid()`` child escapes the kill of its test's group, and can fill the pids
    limit or hold the CPU while a trusted program, a dataset's checker, runs). True when none
    is left."""
    return kill_all(lambda: processes_of(uid))


def kill_all(listed):
    """Kill the processes ``listed()`` names: freeze them all first (SIGSTOP) so a fork bomb
    cannot outrun us, then SIGKILL, then reap (PID 1 inherits the orphans). True when none
    is left within a second."""
    seen = set()
    for _ in range(100):
        pids = listed()
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        if set(pids) <= seen:
            break
        seen.update(pids)
    for pid in listed():
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 1.0
    while True:
        reap()
        if not listed():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)


def freeze_user(who=CANDIDATE, timeout_s=1.0):
    """Stop every process of ``who``'s uid and see each of them stopped: what it runs gets no
    CPU until ``thaw_user``. The stop is ``kill(-1, SIGSTOP)`` from a child under that uid,
    which the kernel delivers to all of them at once (none forks out of it); a round repeats
    while one still runs (it was sent SIGCONT by another in the instant before that one
    stopped). True when a round found every process stopped (or gone) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        _signal_all_as(who, signal.SIGSTOP)
        time.sleep(0.001)  # a stop lands when the process next leaves the kernel
        if all(_state(pid) in STOPPED_STATES for pid in processes_of(who[0])):
            return True
        if time.monotonic() > deadline:
            return False


def _signal_all_as(who, sig):
    """``kill(-1, sig)`` under ``who``'s uid: every process that uid may signal but init and
    the sender itself."""
    pid = os.fork()
    if pid == 0:
        try:
            drop_privileges(who)
            os.kill(-1, sig)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def thaw_user(who=CANDIDATE):
    """Let every process of ``who``'s uid run again: the counterpart of ``freeze_user``."""
    _signal_all_as(who, signal.SIGCONT)


# /proc/PID/stat's state: stopped (by a signal, or traced), a zombie, dead
STOPPED_STATES = frozenset("TtZX") | {None}


def _state(pid):
    """The process's state letter; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:][:1].decode() or None


def release_candidate():
    """Before a trusted program runs in the middle of an execution (a dataset's checker,
    after each test's program): every process of the candidate's killed, and what it can
    hold without one (SysV objects, files in ``SHARED_DIRS``) freed, so nothing it left can
    keep that program from starting or running. The work dir stays: later tests run the
    program from it. None when done, else why not."""
    if not isolated():
        return None  # everything runs under one uid: ours
    if not kill_user(CANDIDATE[0]):
        return "a process of the candidate's outlived the kill"
    return janitor(None)


def seal_build(workdir):
    """After the program is built: every entry of the work dir becomes root's and read-only,
    the work dir itself root's with mode 1777 (the sticky bit: the candidate may add entries
    but not remove or rename root's). Each test then starts from the same build
    (``fresh_workdir``), whichever container or turn runs it: a test cannot leave a file for
    the next, nor change the program the next one runs. Returns the build's names."""
    if not isolated():
        return frozenset(os.listdir(workdir))
    if not kill_user(CANDIDATE[0]):  # nothing of the compile's may change the build meanwhile
        raise OSError("a process of the candidate's outlived the kill")
    os.seteuid(CANDIDATE[0])
    try:  # as its owner: let root look into every directory of it
        os.chmod(workdir, 0o755)
        _walk(workdir, lambda path, st: os.chmod(path, 0o755) if _is_dir(st) else None)
        build = frozenset(os.listdir(workdir))
    finally:
        os.seteuid(0)
    _walk(workdir, _take)
    os.lchown(workdir, 0, 0)
    os.chmod(workdir, 0o1777)
    return build


def fresh_workdir(workdir, build):
    """Before each test but an execution's first: the candidate's processes killed and what
    they left in its shared places removed (``release_candidate``), and every entry of the
    work dir that is not the build's (``seal_build``) removed. None when done, else why not."""
    why = release_candidate()
    if why is not None or not isolated():
        return why
    try:
        extra = [name for name in os.listdir(workdir) if name not in build]
        for name in extra:
            path = os.path.join(workdir, name)
            if os.lstat(path).st_uid == CANDIDATE[0]:
                os.seteuid(CANDIDATE[0])
                try:
                    remove_tree(path, time.monotonic() + JANITOR_TIMEOUT_S)
                finally:
                    os.seteuid(0)
            else:  # not a directory (the candidate makes none of root's): a hard link
                os.unlink(path)
    except (OSError, TimeoutError) as exc:
        return f"the work dir could not be reset: {exc}"
    return None


def remove_workdir(workdir):
    """The execution's work dir, emptied of the candidate's entries (``janitor``), removed:
    root removes a sealed build, which is root's."""
    if os.lstat(workdir).st_uid == os.geteuid():
        remove_tree(workdir, time.monotonic() + JANITOR_TIMEOUT_S)
    else:
        os.rmdir(workdir)


def _walk(path, visit):
    """``visit(path, lstat)`` every entry under ``path`` (not ``path``), directories before
    their entries; never follows a link."""
    for entry in os.scandir(path):
        st = entry.stat(follow_symlinks=False)
        visit(entry.path, st)
        if _is_dir(st):
            _walk(entry.path, visit)


def _is_dir(st):
    return stat.S_ISDIR(st.st_mode)


def _take(path, st):
    """As root: ``path`` becomes root's, writable by nobody (no set-id bit kept)."""
    os.lchown(path, 0, 0)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(path, st.st_mode & 0o555 | (0o755 if _is_dir(st) else 0o444))


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def reap():
    """Collect every zombie we are the parent of (PID 1 inherits the orphans)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


# --- files and IPC, removed as the candidate's uid ---------------------------------------------


def remove_tree(path, deadline=math.inf):
    """Remove ``path`` whatever the modes the candidate left on it; never follows a link."""
    if time.monotonic() > deadline:
        raise TimeoutError
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not os.path.isdir(path) or os.path.islink(path):
        os.unlink(path)
        return
    if st.st_mode & 0o700 != 0o700:
        os.chmod(path, 0o700)
    for name in os.listdir(path):
        remove_tree(os.path.join(path, name), deadline)
    os.rmdir(path)


def empty_dir(path, deadline=math.inf):
    """Remove everything inside ``path`` (which stays) that is ours: what the image holds
    there is not, and stays."""
    if not os.path.isdir(path):
        return
    if os.stat(path).st_uid == os.geteuid():  # the work dir: the candidate may have locked it
        os.chmod(path, 0o700)
    for name in os.listdir(path):
        entry = os.path.join(path, name)
        if os.lstat(entry).st_uid == os.geteuid():
            remove_tree(entry, deadline)


class _ShmInfo(ctypes.Structure):  # struct shm_info (SHM_INFO)
    _fields_ = [("used_ids", ctypes.c_int)] + [(n, ctypes.c_ulong) for n in (
        "shm_tot", "shm_rss", "shm_swp", "swap_attempts", "swap_successes")]


class _MsgInfo(ctypes.Structure):  # struct msginfo (MSG_INFO: msgpool = queues in use)
    _fields_ = [(n, ctypes.c_int) for n in (
        "msgpool", "msgmap", "msgmax", "msgmnb", "msgmni", "msgssz", "msgtql")] + [
        ("msgseg", ctypes.c_ushort)]


class _SemInfo(ctypes.Structure):  # struct seminfo (SEM_INFO: semusz = sets in use)
    _fields_ = [(n, ctypes.c_int) for n in (
        "semmap", "semmni", "semmns", "semmnu", "semmsl", "semopm", "semume", "semusz",
        "semvmx", "semaem")]


SHM_INFO, MSG_INFO, SEM_INFO = 14, 12, 19
IPCMNI = 32768  # ids below this: Linux's first generation, and gVisor's first 32768
IPC_UNITS = {"shm": "pages", "msg": "queues", "sem": "sets"}
MAX_SCAN = 1 << 20  # the most ids tried where the kernel does not list them


@functools.cache
def libc():
    return ctypes.CDLL(None, use_errno=True)


def _ipc_info():
    c = libc()
    shm, msg, sem = _ShmInfo(), _MsgInfo(), _SemInfo()
    return (shm if c.shmctl(0, SHM_INFO, ctypes.byref(shm)) >= 0 else None,
            msg if c.msgctl(0, MSG_INFO, ctypes.byref(msg)) >= 0 else None,
            sem if c.semctl(0, 0, SEM_INFO, ctypes.byref(sem)) >= 0 else None)


def ipc_counts():
    """What SysV IPC holds in this namespace, from the kernel's own counters (Linux and gVisor,
    which has no /proc/sysvipc): shared-memory pages, message queues, semaphore sets; None
    where the kernel will not say. (gVisor's shm_info.used_ids is the last id, not a count:
    the pages are what both kernels count alike.)"""
    shm, msg, sem = _ipc_info()
    return {"shm": None if shm is None else shm.shm_tot,
            "msg": None if msg is None else msg.msgpool,
            "sem": None if sem is None else sem.semusz}


def ipc_ids(kind):
    """The ids of SysV objects of ``kind``: listed by /proc/sysvipc where the kernel has it;
    else every id up to the last one gVisor handed out (at least IPCMNI of them)."""
    try:
        with open(f"/proc/sysvipc/{kind}") as f:
            header, *rows = f.read().splitlines()
    except (OSError, ValueError):
        shm = _ipc_info()[0]
        last = shm.used_ids if kind == "shm" and shm is not None else 0
        return range(min(max(IPCMNI, last + 1), MAX_SCAN))
    column = header.split().index({"shm": "shmid", "msg": "msqid", "sem": "semid"}[kind])
    return [int(row.split()[column]) for row in rows if row.strip()]


def remove_ipc():
    """Remove every SysV IPC object (its creator may, whatever owner it was given). Return
    codes are not trusted (gVisor's msgctl reports success for ids that do not exist):
    ``Slate.problems`` counts what is left."""
    c = libc()
    remove = {"shm": lambda i: c.shmctl(i, IPC_RMID, None),
              "msg": lambda i: c.msgctl(i, IPC_RMID, None),
              "sem": lambda i: c.semctl(i, 0, IPC_RMID)}
    for kind, count in ipc_counts().items():
        if count != 0:
            for ident in ipc_ids(kind):
                remove[kind](ident)


def janitor(workdir, timeout_s=JANITOR_TIMEOUT_S):
    """Empty every place the candidate could write (``workdir`` stays, empty) and remove its
    SysV objects, as the candidate's uid; None when done, else why not. Run after ``sweep``:
    no candidate process is left to fight it. Done in this process under the candidate's
    effective uid (a fork costs more than the clean-up): no process could signal, trace or
    prlimit us meanwhile, since those checks look at our real and saved uid, still root."""
    deadline = time.monotonic() + timeout_s
    root = os.geteuid() == 0
    try:
        if root:
            os.seteuid(CANDIDATE[0])
        for path in (workdir, *SHARED_DIRS):
            if path is not None:
                empty_dir(path, deadline)
        remove_ipc()
        return None
    except TimeoutError:
        return f"the clean-up ran past {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001 - RecursionError included: not proven clean
        return f"the clean-up failed: {type(exc).__name__}: {exc}"
    finally:
        if root:
            os.seteuid(0)


# --- proving the slate clean -------------------------------------------------------------------


def listing(path):
    """The names in ``path`` (sorted; empty when there is no such directory)."""
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def used_bytes(path):
    """Bytes used on ``path``'s own file system; None where it has none (runc's /tmp lies on
    the read-only root, whose use moves with the host's disk)."""
    try:
        if os.stat(path).st_dev == os.stat("/").st_dev:
            return None
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def kept_bytes():
    """Bytes on the pool's tmpfs of kept files (sandbox/harness/checker.py's CACHE_ROOT): a
    tmpfs's pages are the container's memory too. 0 where it is not mounted."""
    return used_bytes(KEPT_ROOT) or 0


def memory_in_use():
    """Anonymous + shared memory of the container's cgroup (v2 or v1): what a leftover can
    hold on to. Page cache is left out: the kernel reclaims it on demand."""
    for path, keys in (("/sys/fs/cgroup/memory.stat", ("anon", "shmem")),
                       ("/sys/fs/cgroup/memory/memory.stat", ("total_rss", "total_shmem"))):
        try:
            with open(path) as f:
                values = dict(line.split() for line in f)
        except (OSError, ValueError):
            continue
        return sum(int(values.get(k, 0)) for k in keys)
    return None


def limits_of(pid):
    try:
        with open(f"/proc/{pid}/limits") as f:
            return f.read()
    except OSError:
        return None


class Slate:
    """What a fresh container looks like, taken at start; ``problems`` compares."""

    def __init__(self, zygote=None):
        self.fresh_used = {p: used_bytes(p) for p in (WORK_ROOT, *SHARED_DIRS)}
        self.fresh_names = {p: listing(p) for p in (WORK_ROOT, *SHARED_DIRS)}
        self.fresh_kept = kept_bytes()
        self.fresh_memory = memory_in_use()
        self.harness_limits = limits_of(os.getpid())
        self.kept = {}  # pid -> limits: trusted processes kept across executions (the scorer's)
        self.watch(zygote)

    def watch(self, zygote):
        """A new fork server (a Zygote, or None): remember its limits as it starts."""
        self.zygote_limits = None if zygote is None else limits_of(zygote.process.pid)

    def keep(self, pid, rebase=True):
        """A trusted process started between candidates that outlives executions (the
        scorer's fork server, ``scorer.py``): the sweep spares it, and what it holds is part
        of the fresh state from now on. ``rebase=False`` for one that replaces another of
        the same size (the server's spare, forked while a candidate's child runs: the
        memory in use then is no fresh level)."""
        self.kept[pid] = limits_of(pid)
        if rebase:
            self.rebase()

    def forget(self, pid):
        self.kept.pop(pid, None)

    def rebase(self):
        """The memory in use now is the fresh level: called by trusted code only, before
        any candidate process of the execution runs (a kept process grew). What the kept
        checkers added since the start stays out of it: they are callers' files, which
        every later check must still count."""
        memory = memory_in_use()
        self.fresh_memory = None if memory is None else (
            memory - max(0, kept_bytes() - self.fresh_kept))

    def problems(self, zygote):
        """Why this container is not as it was fresh (empty when it is)."""
        found = []
        left = other_processes(exclude=(*self.kept, *(() if zygote is None
                                                     else (zygote.process.pid,))))
        if left:
            found.append(f"{len(left)} processes left")
        for path in (WORK_ROOT, *SHARED_DIRS):
            try:
                names = listing(path)
            except OSError as exc:
                found.append(f"{path} unreadable: {exc}")
                continue
            if names != self.fresh_names[path]:
                found.append(f"{path} holds {sorted(set(names) - set(self.fresh_names[path]))[:5]}")
            if used_bytes(path) != self.fresh_used[path]:
                found.append(f"{path}: {used_bytes(path)} bytes used, "
                             f"{self.fresh_used[path]} when fresh")
        for kind, count in ipc_counts().items():
            if count is None:
                found.append(f"SysV {kind} objects cannot be counted")
            elif count:
                found.append(f"SysV {kind} left ({count} {IPC_UNITS[kind]})")
        memory = memory_in_use()
        if (memory is not None and self.fresh_memory is not None
                and memory > self.fresh_memory + MEMORY_SLACK_BYTES):
            found.append(f"{(memory - self.fresh_memory) >> 20} MB more memory in use than "
                         "when fresh")
        if limits_of(os.getpid()) != self.harness_limits:
            found.append("the harness's limits changed")
        if zygote is not None and not zygote.alive():
            found.append("the fork server is gone")
        elif zygote is not None and limits_of(zygote.process.pid) != self.zygote_limits:
            found.append("the fork server's limits changed")
        if any(limits_of(pid) not in (None, limits) for pid, limits in self.kept.items()):
            found.append("the scorer's fork server's limits changed")
        return found
