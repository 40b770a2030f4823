"""Landlock: what files a scoring worker may open, for any user.

A worker whose uid is the server's (a server that is not root: the shipped image, a pod with
``runAsNonRoot``) could otherwise read every file the server reads: the API token's file, the
Docker client's key, a cloud credential; and a check returns text to its caller. Landlock
(Linux 5.13+, no privilege needed beyond ``no_new_privs``) restricts this process and its
children to the trees named here, read-only, and a directory of its own to write in, and
to nothing else, whatever the uid. No right to ``execve`` is given: a worker runs no
program.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

from reward_server.libc import last_error, libc

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # one number on every machine
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_TRUNCATE = 1 << 14


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The kernel's Landlock version; 0 where there is none (an older kernel, or a container
    whose seccomp profile refuses the call)."""
    version = libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(version, 0)


def _handled(version: int) -> int:
    """Every file right this kernel knows, so none is left unrestricted."""
    rights = (1 << 13) - 1  # version 1: execute .. make symlink
    if version >= 2:
        rights |= 1 << 13  # refer
    if version >= 3:
        rights |= _TRUNCATE
    if version >= 5:
        rights |= 1 << 15  # ioctl on devices
    return rights


def restrict(readable: Iterable[str], writable_files: Iterable[str] = (),
             writable_dirs: Iterable[str] = ()) -> str | None:
    """Allow reading beneath ``readable`` (directories or files), reading and writing
    ``writable_files`` (``/dev/null``), everything but running a program beneath
    ``writable_dirs``, and nothing else, from now on. Paths that do not exist are skipped.
    ``None`` once done, else why it could not be (the caller logs it)."""
    version = abi()
    if version == 0:
        return "this kernel (or the container's seccomp profile) offers no Landlock"
    handled = _handled(version)
    write = _READ_FILE | _WRITE_FILE | (_TRUNCATE if version >= 3 else 0)
    rules = [(path, _READ_FILE | _READ_DIR, _READ_FILE) for path in readable]
    rules += [(path, write, write) for path in writable_files]
    rules += [(path, handled & ~_EXECUTE, write) for path in writable_dirs]
    return _restrict(handled, rules)


def deny_writes() -> str | None:
    """From now on, write, make or remove no file anywhere (a layer on top of ``restrict``'s:
    what is read stays as it was). For a plug-in check's child, whose worker may write in
    its own directory: nothing the check writes is there for the next item."""
    version = abi()
    if version == 0:
        return "this kernel (or the container's seccomp profile) offers no Landlock"
    return _restrict(_handled(version) & ~(_EXECUTE | _READ_FILE | _READ_DIR), [])


def _restrict(handled: int, rules: list[tuple[str, int, int]]) -> str | None:
    """A ruleset handling ``handled``, with (path, rights for a directory, for a file)."""
    attr = _RulesetAttr(handled)
    ruleset = libc().syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr),
                             ctypes.c_uint32(0))
    if ruleset < 0:
        return f"landlock_create_ruleset: {last_error()}"
    try:
        for path, dir_rights, file_rights in rules:
            _allow(ruleset, path, dir_rights, file_rights)
        if libc().syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            return f"landlock_restrict_self: {last_error()}"
    finally:
        os.close(ruleset)
    return None


def _allow(ruleset: int, path: str, dir_rights: int, file_rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        rights = dir_rights if os.path.isdir(path) else file_rights
        rule = _PathBeneathAttr(rights, fd)
        if libc().syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule),
                        ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)
