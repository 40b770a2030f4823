"""Seccomp filters for the processes that run what a completion can reach: the scoring
workers (``worker_isolation``) and a plug-in's per-item check (``check_worker``).

A filter works for any user (it needs ``no_new_privs``, not root), so it is the rule that
holds where the server cannot give its workers a uid of their own (a container started as
a non-root user). Each filter answers the syscalls it denies with an error, so the code
that tried gets an ``OSError`` (the item's doing: a 0), and kills the process for a syscall
of another architecture (``int 0x80`` on x86_64), which would skip the table.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Iterable

from reward_server.libc import last_error, libc

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_LD_W_ABS, _JEQ_K, _JGE_K, _AND_K, _RET_K = 0x20, 0x15, 0x35, 0x54, 0x06
_ALLOW, _KILL_PROCESS = 0x7FFF0000, 0x80000000
_SIGKILL, _SIGSTOP = 9, 19
# seccomp_data: nr (u32), arch (u32), instruction pointer (u64), args[6] (u64 each); an
# argument's low half (a pid, a signal) is at 16 + 8 * i on a little-endian machine
_ARCH_OFFSET, _NR_OFFSET, _ARGS_OFFSET = 4, 0, 16

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_NUMBERS = {
    "x86_64": {
        "socket": 41, "io_uring_setup": 425, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "kill": 62, "tkill": 200, "tgkill": 234,
        "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "setsid": 112, "setpgid": 109,
        "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59,
        "execveat": 322, "prlimit64": 302, "sched_setaffinity": 203,
        "sched_setparam": 142, "sched_setscheduler": 144, "sched_setattr": 314,
        "migrate_pages": 256, "move_pages": 279, "perf_event_open": 298,
        "setpriority": 141, "ioprio_set": 251, "kcmp": 312, "shmget": 29, "semget": 64,
        "msgget": 68, "mq_open": 240, "memfd_create": 319, "add_key": 248,
        "request_key": 249, "keyctl": 250, "timer_create": 222, "unshare": 272,
        "setns": 308, "socketpair": 53, "fcntl": 72, "ioctl": 16, "memfd_secret": 447,
        "prctl": 157,
        "io_setup": 206, "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300,
        "sync": 162, "syncfs": 306, "fadvise64": 221, "setrlimit": 160,
        "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "chown": 92,
        "fchown": 93, "lchown": 94, "fchownat": 260, "setxattr": 188, "lsetxattr": 189,
        "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
        "utime": 132, "utimes": 235, "utimensat": 280, "futimesat": 261,
        "shmat": 30, "shmdt": 67, "shmctl": 31, "semop": 65, "semtimedop": 220, "semctl": 66,
        "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "userfaultfd": 323, "personality": 135,
        "capget": 125, "bpf": 321,
        "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230,
        "getpgid": 121, "getsid": 124, "getpriority": 140, "sched_getparam": 143,
        "sched_getscheduler": 145, "sched_rr_get_interval": 148, "sched_getaffinity": 204,
        "sched_getattr": 315, "ioprio_get": 252, "get_robust_list": 274,
    },
    "aarch64": {
        "socket": 198, "io_uring_setup": 425, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "kill": 129, "tkill": 130, "tgkill": 131,
        "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "setsid": 157, "setpgid": 154,
        "clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "prlimit64": 261,
        "sched_setaffinity": 122, "sched_setparam": 118, "sched_setscheduler": 119,
        "sched_setattr": 274, "migrate_pages": 238, "move_pages": 239,
        "perf_event_open": 241, "setpriority": 140, "ioprio_set": 30, "kcmp": 272,
        "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180, "memfd_create": 279,
        "add_key": 217, "request_key": 218, "keyctl": 219, "timer_create": 107,
        "unshare": 97, "setns": 268, "socketpair": 199, "fcntl": 25, "ioctl": 29,
        "memfd_secret": 447, "io_setup": 0, "inotify_init1": 26, "fanotify_init": 262,
        "prctl": 167,
        "sync": 81, "syncfs": 267, "fadvise64": 223, "setrlimit": 164, "fchmod": 52,
        "fchmodat": 53, "fchmodat2": 452, "fchown": 55, "fchownat": 54, "setxattr": 5,
        "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "utimensat": 88,
        "shmat": 196, "shmdt": 197, "shmctl": 195, "semop": 193, "semtimedop": 192,
        "semctl": 191, "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "userfaultfd": 282,
        "personality": 92, "capget": 90, "bpf": 280,
        "clock_gettime": 113, "clock_getres": 114, "clock_nanosleep": 115,
        "getpgid": 155, "getsid": 156, "getpriority": 141, "sched_getparam": 121,
        "sched_getscheduler": 120, "sched_rr_get_interval": 127, "sched_getaffinity": 123,
        "sched_getattr": 275, "ioprio_get": 31, "get_robust_list": 100,
    },
}
# Commands that make the kernel signal a process of the caller's choosing when a descriptor
# is ready (any signal, SIGKILL included, to any process or group of the same uid: under a
# non-root server, the server): fcntl's F_SETOWN, F_SETOWN_EX and F_SETSIG; ioctl's
# FIOSETOWN, SIOCSPGRP and TIOCSPGRP
_FCNTL_OWNER = (8, 15, 10, 1031)  # and F_SETPIPE_SZ: a megabyte of kernel memory a pipe
# What a frozen process (a check's child) may not change of itself: its parent-death signal
# (it would outlive its zygote) or whether it is dumpable; nor may it use core scheduling
# (PR_SCHED_CORE: another process's cookie, by pid)
_PRCTL_FROZEN = (1, 4, 62)
_IOCTL_OWNER = (0x8901, 0x8902, 0x5410)
# The syscalls that send a signal: (name, the argument holding the target, the signal's)
_SIGNALLING = [("kill", 0, 1), ("tkill", 0, 1), ("tgkill", 0, 2), ("rt_sigqueueinfo", 0, 1),
               ("rt_tgsigqueueinfo", 0, 2)]
# The syscalls that read another process's state by its pid, with no permission asked (its
# group, session, priority, scheduling, CPU affinity): which pids live, which is the
# server; (name, the argument holding the pid)
_PROBING = [("getpgid", 0), ("getsid", 0), ("getpriority", 1), ("sched_getparam", 0),
            ("sched_getscheduler", 0), ("sched_rr_get_interval", 0),
            ("sched_getaffinity", 0), ("sched_getattr", 0), ("ioprio_get", 1),
            ("get_robust_list", 0)]
# The clock calls, whose negative clock ids name a process's CPU clock by its pid (any
# process's, no permission asked: how busy the server or another caller's item is)
_CLOCKS = ("clock_gettime", "clock_getres", "clock_nanosleep")

# What no scoring process needs: a network, another process's memory or a handle on it, a
# say in how the server is scheduled (its CPUs, its priority: one caller's lever on all),
# an IPC object (SysV, POSIX queues), made or an existing one by its small, guessable id
# (read, written, emptied or removed: the host's, the uid's), or a key in the user's
# keyring, which would outlive it and be found by the next item, memory its address-space
# cap does not count (a memfd's or a secret memfd's pages, AIO contexts: a gigabyte and
# more, or a host-wide limit), a timer that could deliver it SIGKILL (a kill from outside,
# to the pool), a namespace of its own, a watch on files it may not open (inotify,
# fanotify: other processes' file names), the whole host's disk writeback or page cache
WORKER_DENIED = ("socket", "io_uring_setup", "ptrace", "process_vm_readv",
                 "process_vm_writev", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
                 "sched_setaffinity", "sched_setparam", "sched_setscheduler", "sched_setattr",
                 "migrate_pages", "move_pages", "perf_event_open", "setpriority",
                 "ioprio_set", "kcmp", "shmget", "semget", "msgget", "mq_open", "shmat",
                 "shmdt", "shmctl", "semop", "semtimedop", "semctl", "msgsnd", "msgrcv",
                 "msgctl", "bpf",
                 "memfd_create", "memfd_secret", "add_key", "request_key", "keyctl",
                 "timer_create", "unshare", "setns", "io_setup", "inotify_init",
                 "inotify_init1", "fanotify_init", "sync", "syncfs", "fadvise64")
# What a per-item check may not do besides: start a process or a thread (each would take a
# CPU from other callers' items beyond its share, and threads count to a container's pids
# limit that a non-root server shares with its checks), leave its group, run a program,
# make a socket pair (its buffers: kernel memory, uncapped), change its own limits (a
# lower CPU limit's SIGKILL would pass for a kill from outside), change a file's mode,
# owner, times or attributes (Landlock leaves those to the uid, which under a non-root
# server owns what the server does), fault its own pages in from user space or change its
# execution domain (neither needed, both a kernel surface), or read any process's
# capabilities (``capget`` names it inside a struct a filter cannot read: which pids live)
CHECK_DENIED = ("fork", "vfork", "clone", "clone3", "setsid", "setpgid", "execve",
                "execveat", "socketpair", "setrlimit", "chmod", "fchmod",
                "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
                "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
                "fremovexattr", "utime", "utimes", "utimensat", "futimesat", "userfaultfd",
                "personality", "capget")


def install(denied: Iterable[str], signal_targets: Iterable[int] | None = None,
            freeze_limits: bool = False, own_process_only: bool = False) -> None:
    """Add a filter to this process and every one it starts.

    Each of ``denied`` fails with EPERM. A limit (``prlimit64``) may be set on this process
    alone: a worker that shares the server's uid could otherwise take the server's
    descriptors away. No descriptor may be given an owner to signal (``fcntl``, ``ioctl``):
    the kernel would send any signal to any process of the uid. With ``signal_targets``, a
    signal may go only to those pids (0: the caller's group, ``-pgid``: a group), and never
    ``SIGKILL`` or ``SIGSTOP``: a process that could kill itself from inside could pass for
    one killed from outside, which is retried and never scored 0. With ``freeze_limits``,
    ``prlimit64`` may read a limit and not set one (add ``setrlimit`` to ``denied``), and
    ``prctl`` may not change the parent-death signal or dumpability. With
    ``own_process_only``, what the kernel tells any caller of any pid (its group, session,
    priority, scheduling, CPU clock) it tells this process of itself alone."""
    machine = platform.machine()
    if machine not in _NUMBERS:
        raise OSError(f"no seccomp filter for {machine}")
    numbers = _NUMBERS[machine]
    program = _Program()
    program.load(_ARCH_OFFSET)
    program.jump_if(_AUDIT_ARCH[machine], "arch ok")
    program.ret(_KILL_PROCESS)
    program.label("arch ok")
    program.load(_NR_OFFSET)
    for name in denied:
        if name in numbers:  # aarch64 has no fork or vfork: clone covers them
            program.jump_if(numbers[name], "deny")
    program.jump_if(numbers["prlimit64"], "prlimit")
    program.jump_if(numbers["fcntl"], "fcntl")
    program.jump_if(numbers["ioctl"], "ioctl")
    if freeze_limits:
        program.jump_if(numbers["prctl"], "prctl")
    if signal_targets is not None:
        for name, _, _ in _SIGNALLING:
            program.jump_if(numbers[name], f"signal {name}")
    if own_process_only:
        for name, _ in _PROBING:
            program.jump_if(numbers[name], f"probe {name}")
        for name in _CLOCKS:
            program.jump_if(numbers[name], "clock")
    program.ret(_ALLOW)
    program.label("deny")
    program.ret(0x00050000 | errno.EPERM)
    program.label("prlimit")
    program.load(_ARGS_OFFSET)  # its pid: 0 or its own
    program.jump_if(0, "own limit")
    program.jump_if(os.getpid(), "own limit")
    program.ret(0x00050000 | errno.EPERM)
    program.label("own limit")
    if freeze_limits:  # a new limit's pointer, both halves, must be NULL
        program.load(_ARGS_OFFSET + 8 * 2)
        program.jump_if(0, "no new limit, low")
        program.ret(0x00050000 | errno.EPERM)
        program.label("no new limit, low")
        program.load(_ARGS_OFFSET + 8 * 2 + 4)
        program.jump_if(0, "allow")
        program.ret(0x00050000 | errno.EPERM)
    else:
        program.ret(_ALLOW)
    rules = [("fcntl", _FCNTL_OWNER), ("ioctl", _IOCTL_OWNER)]
    if freeze_limits:
        rules.append(("prctl", _PRCTL_FROZEN))
    for name, commands in rules:
        program.label(name)
        program.load(_ARGS_OFFSET + (0 if name == "prctl" else 8))  # its option, command
        for command in commands:
            program.jump_if(command, f"refuse {name}")
        program.ret(_ALLOW)
        program.label(f"refuse {name}")
        program.ret(0x00050000 | errno.EPERM)
    if signal_targets is not None:
        targets = sorted({t & 0xFFFFFFFF for t in signal_targets})
        for name, target_arg, signal_arg in _SIGNALLING:
            program.label(f"signal {name}")
            program.load(_ARGS_OFFSET + 8 * signal_arg)
            program.jump_if(_SIGKILL, f"refuse {name}")  # BPF jumps forward only
            program.jump_if(_SIGSTOP, f"refuse {name}")
            program.load(_ARGS_OFFSET + 8 * target_arg)
            for target in targets:
                program.jump_if(target, "allow")
            program.label(f"refuse {name}")
            program.ret(0x00050000 | errno.EPERM)
    if own_process_only:
        _own_process_rules(program)
    program.label("allow")
    program.ret(_ALLOW)
    program.install()


def _own_process_rules(program: _Program) -> None:
    """A probe's pid must be 0 or this process's; a clock id may be a system clock (0 and
    up), this process's CPU clocks by pid 0 (-8 to -1), or by its own pid (``~pid << 3``
    and a 3-bit type), never another process's."""
    me = os.getpid()
    for name, pid_arg in _PROBING:
        program.label(f"probe {name}")
        program.load(_ARGS_OFFSET + 8 * pid_arg)
        program.jump_if(0, "allow")
        program.jump_if(me, "allow")
        program.ret(0x00050000 | errno.EPERM)
    program.label("clock")
    program.load(_ARGS_OFFSET)  # the clock id, an int
    program.jump_if_at_least(0xFFFFFFF8, "allow")  # -8 to -1: pid 0, this process
    program.jump_if_at_least(0x80000000, "a cpu clock")
    program.ret(_ALLOW)  # a system clock
    program.label("a cpu clock")
    program.and_(0xFFFFFFF8)
    program.jump_if((~me << 3) & 0xFFFFFFFF, "allow")
    program.ret(0x00050000 | errno.EPERM)


class _Program:
    """A classic BPF program with named jump targets, resolved at ``install``."""

    def __init__(self) -> None:
        self.ops: list[tuple[int, str | None, int]] = []  # (code, jump target, k)
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.ops.append((_LD_W_ABS, None, offset))

    def jump_if(self, value: int, target: str) -> None:
        self.ops.append((_JEQ_K, target, value))

    def jump_if_at_least(self, value: int, target: str) -> None:
        self.ops.append((_JGE_K, target, value))

    def and_(self, mask: int) -> None:
        """The loaded word ANDed with ``mask``."""
        self.ops.append((_AND_K, None, mask))

    def ret(self, value: int) -> None:
        self.ops.append((_RET_K, None, value))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ops)

    def install(self) -> None:
        code = b""
        for index, (op, target, k) in enumerate(self.ops):
            jt = self.labels[target] - index - 1 if target is not None else 0
            if not 0 <= jt <= 255:
                raise ValueError(f"seccomp jump to {target!r} is backwards or too long")
            code += struct.pack("HBBI", op, jt, 0, k)
        buffer = ctypes.create_string_buffer(code)
        program = _Filter(len(self.ops), ctypes.cast(buffer, ctypes.c_void_p))
        if libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0):
            raise OSError(ctypes.get_errno(), f"seccomp filter refused: {last_error()}")


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
