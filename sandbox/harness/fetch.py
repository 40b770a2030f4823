"""The files a snippet's caller asks back (``fetch_files``), read as the program itself could
read them: by a child of the harness that has dropped to the candidate's uid for good, each
path resolved inside the work dir one component at a time, no symbolic link followed.

Why both. PID 1 under a mere effective-uid change still is PID 1: ``/proc/self`` is the
harness, whose memory map and descriptors its own thread group may always read, so a link
``p -> /proc/self`` the program left in its work dir handed ``p/maps`` of the harness to the
caller. A path is therefore opened component by component relative to the directory before it
(``openat`` with ``O_NOFOLLOW``), each checked against what ``lstat`` saw there first: gVisor
follows a link opened ``O_DIRECTORY | O_NOFOLLOW``, so the flag alone is not trusted. A link
anywhere on the path, even one that points back inside the work dir, refuses the file (the
program can copy a file instead). The child's real, effective and saved uids are the
candidate's, so anything it could still reach (a hard link, say) is something the program
could read itself, and its ``/proc/self`` is its own. Only regular files are opened, and
non-blocking (a FIFO swapped in must not hang the reader).

Everything read together stays within the reply's budget (``limit``, counted as the base64
that carries the files); a file past it is left out whole, never cut, and named.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import select
import signal
import stat
import time

from . import slate
from .paths import path_parts
from .processes import make_undumpable

TIMEOUT_S = 5.0  # the reader reads a tmpfs; a stopped or killed one costs the call its files
# No O_DIRECTORY, even for a directory: gVisor follows a link opened O_DIRECTORY | O_NOFOLLOW
# (to a file too), where it refuses one opened O_NOFOLLOW alone; the kind is checked after
FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
LINK = "a symbolic link on its path (not followed)"


class Refused(Exception):
    """A path that resolves to no regular file without following a link: why, in words."""


def open_inside(workdir, rel):
    """A descriptor of the regular file ``rel`` under ``workdir``, each component opened
    relative to the one before it and checked to be what ``lstat`` saw there (no link, the
    same inode: nothing swapped in meanwhile). Refused, ValueError or OSError."""
    parts = path_parts(rel)
    fd = os.open(workdir, FLAGS)
    try:
        for index, name in enumerate(parts):
            parent, fd = fd, -1
            try:
                fd = _open_entry(name, parent, last=index == len(parts) - 1)
            finally:
                os.close(parent)
        found, fd = fd, -1
        return found
    finally:
        if fd >= 0:
            os.close(fd)


def _open_entry(name, dir_fd, last):
    seen = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(seen.st_mode):
        raise Refused(LINK)
    if not (stat.S_ISREG if last else stat.S_ISDIR)(seen.st_mode):
        raise Refused("not a regular file" if last else "not a directory on its path")
    fd = os.open(name, FLAGS, dir_fd=dir_fd)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino, stat.S_IFMT(opened.st_mode)) != (
            seen.st_dev, seen.st_ino, stat.S_IFMT(seen.st_mode)):
        os.close(fd)
        raise Refused("changed while it was opened")
    return fd


def read_files(names, workdir, limit):
    """``{"files": {path: base64}, "missing": {path: why}, "cut": {path: size}}``: the
    regular files among ``names``, in order, while their base64 fits in ``limit``; ``cut``
    holds those left out for the limit alone."""
    found, missing, cut = {}, {}, {}
    for rel in dict.fromkeys(names):
        try:
            fd = open_inside(workdir, rel)
        except (Refused, ValueError) as exc:
            missing[rel] = str(exc)
            continue
        except OSError as exc:
            missing[rel] = LINK if exc.errno == errno.ELOOP else exc.strerror or str(exc)
            continue
        try:
            size = os.fstat(fd).st_size
            allowed = 3 * (limit // 4)  # base64 makes 4 bytes of each 3
            data = b""
            if size <= allowed:
                with os.fdopen(os.dup(fd), "rb") as f:
                    data = f.read(allowed + 1)  # it may grow (a program of the candidate's)
            if size > allowed or len(data) > allowed:
                cut[rel] = max(size, len(data))
                missing[rel] = f"over the response limit ({cut[rel]} bytes)"
                continue
            found[rel] = base64.b64encode(data).decode()
            limit -= len(found[rel])
        finally:
            os.close(fd)
    return {"files": found, "missing": missing, "cut": cut}


def fetch_files(names, workdir, limit):
    """``(files, missing, cut)`` of ``read_files``, read by a child as the candidate; every
    name is missing (with the reason) if that child fails or stalls."""
    names = list(dict.fromkeys(names))
    if not names:
        return {}, {}, {}
    answer, why = _in_child(names, workdir, limit)
    if answer is None:
        return {}, dict.fromkeys(names, why), {}
    asked = set(names)
    files = {k: v for k, v in _dict(answer, "files").items() if k in asked and isinstance(v, str)}
    missing = {k: str(v) for k, v in _dict(answer, "missing").items() if k in asked}
    cut = {k: v for k, v in _dict(answer, "cut").items() if k in asked and isinstance(v, int)}
    missing.update((k, "not read") for k in asked - files.keys() - missing.keys())
    return files, missing, cut


def _in_child(names, workdir, limit):
    """``read_files`` in a fork of ours that holds the candidate's uid; (answer, None) or
    (None, why). Its answer is read with a cap and a deadline: once it runs as the candidate,
    a process the program left behind may signal it."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            writer = _only(writer)
            slate.drop_privileges()
            make_undumpable()  # so no process of the candidate's may trace or read it
            payload = json.dumps(read_files(names, workdir, limit)).encode()
            with os.fdopen(writer, "wb") as out:
                out.write(payload)
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    # the base64, and each name thrice (JSON may escape a character to six) with its reason
    cap = limit + sum(18 * len(n.encode()) + 256 for n in names) + 1024
    chunks, size, why = [], 0, None
    deadline = time.monotonic() + TIMEOUT_S
    waiting = select.poll()  # not select(): under gVisor its seccomp profile refuses it
    waiting.register(reader, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not waiting.poll(left * 1000):
                why = "not read: the reader stalled"
                break
            chunk = os.read(reader, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                why = "not read: the reader's answer was too large"
                break
    finally:
        os.close(reader)
        if why is not None:
            _kill(pid)
        _, status = os.waitpid(pid, 0)
    if why is None and status != 0:
        why = "not read: the reader failed"
    if why is not None:
        return None, why
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        return None, "not read: the reader's answer was malformed"
    return (answer, None) if isinstance(answer, dict) else (None, "not read")


def _dict(answer, key):
    value = answer.get(key)
    return value if isinstance(value, dict) else {}


def _only(writer):
    """In the child: every descriptor closed but its answer's (the host's channel too), and
    /dev/null as 0, 1 and 2; the answer's descriptor, moved to 3."""
    os.dup2(writer, 3, inheritable=False)
    os.closerange(0, 3)
    os.closerange(4, os.sysconf("SC_OPEN_MAX"))
    null = os.open(os.devnull, os.O_RDWR)  # 0
    os.dup2(null, 1)
    os.dup2(null, 2)
    return 3


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
