"""Paths in the work dir that a caller names: ``files`` and ``fetch_files`` of ``/run_code``
and ``/run_jupyter``, a session's ``files``. One rule for what such a name may be, kept by the
host (which refuses a bad one before any container is asked for: ``sandbox/caller_files.py``'s
``check_paths``) and by the harness (which writes and reads them, and keeps the rule again).

Why each bound. A name the kernel cannot take, or that the harness cannot write, passed the
host's old check and then failed inside the container: the caller's own input answered as a
sandbox failure (503), a container spent on it. A NUL cannot be in a file name; a component
past ``NAME_MAX`` or a path past ``PATH_MAX`` is ENAMETOOLONG; 3000 levels made
``os.makedirs`` (which recurses once per level) raise RecursionError; and a file that is also
a directory of another (``a`` and ``a/b``), or one named twice (``a/b`` and ``a\\b``), cannot
both be written. The depth bound also bounds the directories one call makes (``make_parents``).
"""

from __future__ import annotations

import os
import re
import stat

NAME_MAX = 255  # bytes of one component, UTF-8 (Linux, and gVisor)
# bytes of the whole name: PATH_MAX (4096, with its NUL) less room for the work dir's own path
# (/work/tmpXXXXXXXX/), which comes before it in every system call the harness makes
MAX_PATH_BYTES = 4096 - 256
MAX_DEPTH = 64  # components: a project tree of sources and data is far shallower
# C0, DEL and C1: a NUL names no file; the others are no file name a caller means
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
RELATIVE = "a relative path inside the work dir, without '..'"
TOO_LONG = f"more than {MAX_PATH_BYTES} bytes (PATH_MAX, less room for the work dir's path)"


class BadPath(ValueError):
    """A name that cannot name a file in the work dir: why, in words."""


def path_parts(rel):
    """The components of ``rel``, a path inside the work dir (``\\`` read as ``/``); BadPath
    for an absolute path, a ``.``, ``..`` or empty component, a character that is no file
    name's, or a name past NAME_MAX, MAX_PATH_BYTES or MAX_DEPTH."""
    if len(rel) > MAX_PATH_BYTES:  # before any pass over it: a name may be megabytes
        raise BadPath(TOO_LONG)
    parts = rel.replace("\\", "/").split("/")
    if os.path.isabs(rel) or any(p in ("", ".", "..") for p in parts):
        raise BadPath(RELATIVE)
    control = _CONTROL.search(rel)
    if control is not None:
        raise BadPath(f"a control character ({control.group()!r}) in the name")
    try:
        size = len(rel.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadPath("not UTF-8 (a lone surrogate)") from None
    if size > MAX_PATH_BYTES:
        raise BadPath(TOO_LONG)
    if len(parts) > MAX_DEPTH:
        raise BadPath(f"{len(parts)} levels deep, more than {MAX_DEPTH}")
    for part in parts:
        length = len(part.encode("utf-8"))
        if length > NAME_MAX:
            raise BadPath(f"a component of {length} bytes, more than NAME_MAX ({NAME_MAX})")
    return parts


def clashes(named, taken=None):
    """Why ``named`` (name -> its ``path_parts``) cannot all be written, naming the two that
    clash (``files[...]``); or None. A file named twice (``a/b``, ``a\\b``), or that is a
    directory of another too (``a``, ``a/b``), or whose directory is one of ``taken`` (a name
    at the work dir's top -> what it is: the program's own file). Linear in the components:
    a tree of them (a directory a dict, a file the words that name it), no prefix joined."""
    tree = dict(taken or {})
    for name, parts in named.items():
        node = tree
        for index, part in enumerate(parts[:-1]):
            entry = node.setdefault(part, {})
            if isinstance(entry, str):
                where = shown("/".join(parts[:index + 1]))
                return f"files[{shown(name)}]: its directory {where} is {entry}, a file"
            node = entry
        entry = node.get(parts[-1])
        if isinstance(entry, str):
            return f"files[{shown(name)}]: the same file as {entry}"
        if entry is not None:
            while isinstance(entry, dict):  # a file below it, to name
                entry = next(iter(entry.values()))
            return f"files[{shown(name)}]: a file, and a directory of {entry}"
        node[parts[-1]] = f"files[{shown(name)}]"
    return None


def shown(name, limit=100):
    """``name`` as a message shows it: its repr, cut after ``limit`` characters (``…``
    marks the cut), since a name a caller sends may be megabytes."""
    if len(name) <= limit:
        return repr(name)
    cut = repr(name[:limit])
    return f"{cut[:-1]}…{cut[-1]}"


def make_parents(workdir, parts, made):
    """The directories above ``parts`` in ``workdir``, one level at a time (``os.makedirs``
    recurses once per level), each made once per call (``made``: those made so far). An
    existing entry that is not a directory raises FileExistsError."""
    path = workdir
    for name in parts[:-1]:
        path = os.path.join(path, name)
        if path in made:
            continue
        try:
            os.mkdir(path)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                raise
        made.add(path)
