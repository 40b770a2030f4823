"""The C library, for the process controls Python does not wrap: ``prctl``, the seccomp and
Landlock calls, ``munmap`` of an inherited mapping. Loaded once per process."""

from __future__ import annotations

import ctypes
import functools
import os

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_NO_NEW_PRIVS = 1, 4, 15, 38


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def last_error() -> str:
    """The text of the errno the last failed call through ``libc`` left."""
    return os.strerror(ctypes.get_errno())


def prctl(option: int, value: int | bytes) -> None:
    """``prctl(option, value)``; ``OSError`` where the kernel refuses it."""
    if libc().prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}): {last_error()}")
