"""What a compile step made, packed for the server, and unpacked into another work dir, so
identical sources across the items of a batch compile once (``sandbox/builds.py``); a
dataset's checker's too, under the checker's uid (``checker.py``).

Packed right after the compiler exits, before any program of the candidate's runs, read under
the candidate's uid (the work dir is its own): every regular file but the source, outside
dot-directories (Go's build cache). Unpacked under the candidate's uid into a fresh work dir,
in place of the compile. The files are the candidate's own program, for the same source: no
other program can use them (the server keys them by language and source).
"""

from __future__ import annotations

import base64
import os
import stat

from . import slate

MAX_BYTES = 16 * 1024 * 1024  # a larger build is not shipped: the next item compiles again
MAX_FILES = 256


def pack(workdir, source_name, who=None):
    """{relative path: [mode, base64]} of what the compile made; None when too large.
    ``who``: the (uid, gid) that owns ``workdir`` (default: the candidate's)."""
    files, total = {}, 0
    with as_candidate(who):
        for top, dirs, names in os.walk(workdir):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in names:
                path = os.path.join(top, name)
                rel = os.path.relpath(path, workdir)
                st = os.lstat(path)
                if rel == source_name or not stat.S_ISREG(st.st_mode):
                    continue
                total += st.st_size
                if total > MAX_BYTES or len(files) >= MAX_FILES:
                    return None
                with open(path, "rb") as f:
                    files[rel] = [stat.S_IMODE(st.st_mode) & 0o755,
                                  base64.b64encode(f.read()).decode()]
    return files


def unpack(files, workdir, who=None):
    """Write ``files`` (from ``pack``) into ``workdir``; raises ValueError on a bad path."""
    with as_candidate(who):
        for rel, (mode, data) in files.items():
            parts = rel.split("/")
            if os.path.isabs(rel) or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"bad artifact path {rel!r}")
            path = os.path.join(workdir, *parts)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         int(mode) & 0o755)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(data))


class as_candidate:  # noqa: N801 - used as a context manager, like a function
    """Take the candidate's effective uid (root may not enter its work dir), or ``who``'s;
    no program of that uid runs meanwhile (between executions, or between its compile and
    tests)."""

    def __init__(self, who=None):
        self.who = who or slate.CANDIDATE

    def __enter__(self):
        self.root = slate.isolated()
        if self.root:
            os.setegid(self.who[1])
            os.seteuid(self.who[0])

    def __exit__(self, *exc):
        if self.root:
            os.seteuid(0)
            os.setegid(0)
