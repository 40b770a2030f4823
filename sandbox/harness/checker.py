"""A dataset's checker, for stdin/stdout problems with several correct outputs (CodeContests,
Codeforces): a trusted program called testlib-style as ``checker <input> <output> <answer>``,
exit 0 to accept. Compiled before the candidate's program is, and kept: the next item with
the same checker in this container reuses it (``CACHE_ROOT``, a tmpfs of its own that the
clean slate leaves alone and no candidate can write; the last ``CACHE_SIZE`` are kept).

That tmpfs is shared by every caller's kept checkers, so no caller may fill it for the next:
before a build the least recently used kept checkers go until ``BUILD_ROOM_BYTES`` are free
(a container that cannot give that room is the machine's failure, ``NoRoom``: replaced, and
the item runs on another), and a checker that takes more than ``KEEP_MAX_BYTES`` is used for
its own item and not kept.

It runs under a uid of its own (``CHECKER_IDS``: one per kept checker), so nothing the
candidate left running can trace, signal or replace it; the three files it reads are root's,
readable by its group only, and removed after each check. A checker is a caller's code too:
once compiled, its directory is sealed (root's, readable and runnable by that checker's own
group, writable by nobody), and it writes only in a scratch directory of its own per check
(HOME, TMPDIR), so a checker can neither rewrite another caller's kept checker into one that
accepts everything nor read it (a dataset's checker may hold what its tests hide).

A checker that does not compile, crashes, reports a failure of its own (testlib's exit 3) or
runs past its time limit is the dataset's fault: the item is ``bad_tests`` (null), never a 0 or
a 1 for the candidate — unless it fails only on the candidate's output and accepts the
reference answer (``stdio.judge_output``): then the output made it fail, and the test is a
wrong answer. A wall-clock limit (its compile's, a check's) and a full disk are the machine's
or the moment's word, not the checker's: such a verdict is marked ``momentary``
(``verdicts.momentary``), and the server does not cache it. Before each check every process
of the candidate's uid is killed (``slate.release_candidate``): a child that left its session
could otherwise fill the pids limit, and the checker could not start; a checker that still
cannot start, or runs out of space (its scratch is on the work dir), is the candidate's
failure (``CheckerBlocked``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
import time
from collections import OrderedDict

from . import artifacts, slate
from .processes import children_cpu_s, compiling, killed_from_outside, run_process
from .protocol import tail
from .statuses import PASSED, TIMEOUT, WRONG_ANSWER
from .verdicts import momentary

CHECK_TIME_LIMIT_S = 10.0
# testlib's exit codes that reject the output: 1 wrong answer, 2 presentation error, 4 extra
# output ("dirt"), 7 partial points, 8 unexpected end of file. 3 ("fail") means the checker
# found the jury's own data wrong; anything else is a crash.
REJECTS = frozenset({1, 2, 4, 7, 8})
CACHE_ROOT = slate.KEPT_ROOT  # mounted by the pool (sandbox/pool.py); without it, no cache
CACHE_SIZE = 8
# Free on CACHE_ROOT (64 MB) before a checker builds, kept checkers evicted for it: a C++
# checker's compile writes its objects and binary there (a testlib checker: ~2 MB); the most
# one file may take is FILE_SIZE_LIMIT (16 MB), and a link writes one
BUILD_ROOM_BYTES = 32 * 1024 * 1024
# A checker whose directory takes more is not kept (a testlib checker: under 1 MB; Rust's and
# Go's, stripped: 0.3 and 1.3 MB): eight kept checkers stay well inside CACHE_ROOT
KEEP_MAX_BYTES = 8 * 1024 * 1024
# A uid and gid per kept checker, and one for the checker being built: no checker shares its
# group, which alone may read a sealed directory, with another
CHECKER_IDS = tuple((10100 + i, 10100 + i) for i in range(CACHE_SIZE + 1))
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device", as a compiler reports it
_cache = OrderedDict()  # checker key -> (its directory under CACHE_ROOT, compiled; its ids)


class CheckerBroken(Exception):
    """The dataset's checker failed: the item is bad_tests, with this reason. ``cpu_s``: for
    a check past its time limit, the CPU seconds it had used (None for any other failure)."""

    def __init__(self, reason, cpu_s=None):
        super().__init__(reason)
        self.cpu_s = cpu_s


class NoRoom(Exception):
    """CACHE_ROOT cannot free ``BUILD_ROOM_BYTES`` for a build: the container's state, not
    the dataset's checker (the execution is a harness error: the container is replaced and
    the item runs on another)."""


class CheckerBlocked(Exception):
    """The checker could not run, after the candidate's program did: what that program left
    (its tmpfs full, a pid it kept) is the likely cause, so the test is the candidate's
    failure (``checker_blocked``, 0, never cached), never the dataset's null."""


class OutOfTime(Exception):
    """The item's budget ran out while the checker ran: the candidate's tests are timeouts."""


class Checker:
    def __init__(self, spec, job):
        self.language, self.source = spec["language"], spec["source"]
        self.shipped = spec.get("artifacts")  # an earlier turn's build of it, via the host
        self.build_files = None  # this job's compile of it, packed for the host
        self.job = job
        self.dir = None
        self.env = None
        self.who = CHECKER_IDS[0]
        self.cpu_s = 0.0  # the last check's CPU seconds

    def build(self):
        """Write and compile the checker, or find it compiled; raises CheckerBroken, NoRoom."""
        key = hashlib.sha256(json.dumps([self.language, self.source], sort_keys=True)
                             .encode("utf-8", "surrogatepass")).hexdigest()
        cacheable = slate.isolated() and os.path.ismount(CACHE_ROOT)
        if cacheable and os.path.isdir(_cache.get(key, ("",))[0]):
            _cache.move_to_end(key)
            self.dir, self.who = _cache[key]
            return
        if cacheable:
            make_room(BUILD_ROOM_BYTES)
            used_before = slate.used_bytes(CACHE_ROOT)
        taken = {who for _, who in _cache.values()}
        self.who = next(who for who in CHECKER_IDS if who not in taken)
        self.dir = tempfile.mkdtemp(dir=CACHE_ROOT if cacheable else slate.WORK_ROOT)
        path = os.path.join(self.dir, self.language["source"])
        try:
            with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(self.source)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise self.broken(f"the checker's source could not be written: {exc}",
                                   moment=True) from None
            raise
        if slate.isolated():
            os.chown(path, *self.who)
            os.chown(self.dir, *self.who)
        self.env = self._env(self.dir)
        if self.language.get("compile"):
            if self.shipped is not None:
                self._unpack()
                drop_caches(self.dir, self.who)
            else:
                self._compile()
                drop_caches(self.dir, self.who)
                self.build_files = artifacts.pack(self.dir, self.language["source"], self.who)
        if slate.isolated():
            try:
                seal(self.dir, self.who[1])
            except OSError as exc:  # what its compiler left there cannot be made root's
                raise CheckerBroken(f"the checker's directory could not be sealed: {exc}"
                                    ) from None
        # the tmpfs's growth is this checker's: nothing else writes there during a build
        if cacheable and slate.used_bytes(CACHE_ROOT) - used_before <= KEEP_MAX_BYTES:
            _cache[key] = (self.dir, self.who)
            while len(_cache) > CACHE_SIZE:
                remove(_cache.popitem(last=False)[1][0])

    def broken(self, reason, moment=False):
        """CheckerBroken with ``reason``; ``moment``: a wall-clock limit or a full disk
        decided it, which another moment may not (the verdict is not cached)."""
        if moment:
            momentary(self.job)
        return CheckerBroken(reason)

    @staticmethod
    def _env(home):
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home,
                "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}

    def _compile(self):
        job = self.job
        limit = min(job["compile_time_limit_s"], job["deadline"] - time.monotonic())
        result = run_process(self.language["compile"], b"", limit, job["compile_memory_mb"],
                             job["output_limit_bytes"], job["stderr_tail_bytes"], self.dir,
                             self.env, compiling(self.language), who=self.who)
        if result["status"] is not None:
            timed_out = result["status"] == TIMEOUT
            why = "ran past its time limit" if timed_out else "failed"
            stderr = tail(result["stderr"], job["stderr_tail_bytes"])
            raise self.broken(f"the checker does not compile: the compiler {why}: {stderr}",
                               moment=(timed_out or NO_SPACE in stderr
                                       or killed_from_outside(result)))

    def _unpack(self):
        """An earlier turn's build of this checker (another container compiled it), in place
        of compiling it again: a later turn never holds a container for a checker's compile."""
        try:
            artifacts.unpack(self.shipped, self.dir, self.who)
        except (ValueError, OSError, TypeError) as exc:  # a full disk is the moment's
            raise self.broken(f"the checker's build could not be unpacked: {exc}",
                               moment=isinstance(exc, OSError)) from None

    def judge(self, test_input, output, answer):
        """(status, message) for the candidate's ``output``: passed or wrong_answer. Raises
        CheckerBroken; OutOfTime when the item's budget cut the check short; CheckerBlocked
        when it could not run at all."""
        job = self.job
        why = slate.release_candidate()
        if why is not None:
            raise CheckerBlocked(f"the checker could not run: {why}")
        limit = min(CHECK_TIME_LIMIT_S, job["deadline"] - time.monotonic())
        files = scratch = None
        cpu_before = children_cpu_s()
        try:
            files = self._write_files(test_input, output, answer)
            scratch = self._scratch()
            result = run_process([*self.language["run"], *files], b"", limit,
                                 job["compile_memory_mb"], job["output_limit_bytes"],
                                 job["stderr_tail_bytes"], self.dir, self._env(scratch),
                                 self.language, who=self.who)
        except OSError as exc:  # the work dir's tmpfs, which the candidate can fill
            raise CheckerBlocked(f"the checker's files could not be written: {exc}") from None
        finally:
            if files is not None:
                for path in files:
                    os.unlink(path)
                os.rmdir(os.path.dirname(files[0]))
            if scratch is not None:
                remove(scratch)
        self.cpu_s = children_cpu_s() - cpu_before
        message = tail(result["stderr"] or result["stdout"], job["stderr_tail_bytes"]).strip()
        if not result["started"]:
            raise CheckerBlocked(f"the checker could not start: {message}")
        if result["status"] is None:
            return PASSED, message
        if result["status"] == TIMEOUT:
            if limit < CHECK_TIME_LIMIT_S:
                raise OutOfTime
            # Whose doing that is (the output's, or the moment's load) only a check of the
            # reference answer can tell: stdio.judge_output
            raise CheckerBroken(f"the checker ran past {CHECK_TIME_LIMIT_S:g} s (with "
                                f"{self.cpu_s:.1f} s of CPU)", cpu_s=self.cpu_s)
        if result["code"] in REJECTS:
            return WRONG_ANSWER, message
        if NO_SPACE in message:  # its scratch is on the work dir, which the candidate can fill
            raise CheckerBlocked(f"the checker ran out of space: {message}")
        raise CheckerBroken(f"the checker failed ({result['status']}, exit code "
                            f"{result['code']}): {message}")

    def _write_files(self, test_input, output, answer):
        """The three paths the checker reads, in a directory of root's that only the
        checker's group may read."""
        files = tempfile.mkdtemp(dir=slate.WORK_ROOT)
        paths = [os.path.join(files, name) for name in ("input", "output", "answer")]
        try:
            for path, data in zip(paths, (test_input.encode("utf-8", "surrogatepass"), output,
                                          answer.encode("utf-8", "surrogatepass"))):
                with open(path, "wb") as f:
                    f.write(data)
                if slate.isolated():
                    os.chown(path, 0, self.who[1])
                    os.chmod(path, 0o640)
        except OSError:
            for path in paths:
                if os.path.exists(path):
                    os.unlink(path)
            os.rmdir(files)
            raise
        if slate.isolated():
            os.chown(files, 0, self.who[1])
            os.chmod(files, 0o750)
        return paths

    def _scratch(self):
        """The checker's own writable directory for one check (its HOME and TMPDIR): its
        program's directory is sealed."""
        scratch = tempfile.mkdtemp(dir=slate.WORK_ROOT)
        if slate.isolated():
            os.chown(scratch, *self.who)
        return scratch

    def close(self):
        """Remove its directory, unless the cache keeps it (a checker that did not compile
        is not kept)."""
        if self.dir is not None and self.dir not in (d for d, _ in _cache.values()):
            remove(self.dir)
        self.dir = None


def make_room(needed):
    """Evict kept checkers, least recently used first, until ``needed`` bytes of CACHE_ROOT
    are free; raises NoRoom when even an empty cache leaves too little."""
    while _free(CACHE_ROOT) < needed and _cache:
        remove(_cache.popitem(last=False)[1][0])
    if _free(CACHE_ROOT) < needed:
        raise NoRoom(f"{CACHE_ROOT} has {_free(CACHE_ROOT)} bytes free with no checker kept; "
                     f"a build needs {needed}")


def _free(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def drop_caches(path, who):
    """Remove the compiler's caches from a checker's directory (Go's build cache in its
    HOME): a kept checker holds its program only, since the clean slate counts the memory
    of every tmpfs, this one's too."""
    root = slate.isolated()
    try:
        if root:
            os.seteuid(who[0])
        for name in os.listdir(path):
            cache = os.path.join(path, name)
            if name.startswith(".") and os.path.isdir(cache) and not os.path.islink(cache):
                slate.empty_dir(cache, time.monotonic() + slate.JANITOR_TIMEOUT_S)
                os.rmdir(cache)
    finally:
        if root:
            os.seteuid(0)


def seal(path, gid):
    """Make a compiled checker's directory root's: directories and files readable (and
    runnable, where they were) by the checker's group, writable by no one but root. Owner
    first, then into it: root has no DAC override here and could not enter the checker's
    0700 directory before taking it."""
    st = os.lstat(path)
    os.lchown(path, 0, gid)
    if stat.S_ISLNK(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        os.chmod(path, 0o750)
        for name in os.listdir(path):
            seal(os.path.join(path, name), gid)
    else:
        os.chmod(path, 0o440 | (0o110 if st.st_mode & 0o100 else 0))


def remove(path):
    """Remove a checker's directory: emptied as its owner (root may not enter the checker's
    own; a sealed one is root's), then removed by root, whose directory holds it."""
    owner = os.lstat(path).st_uid if slate.isolated() else None
    try:
        if owner:
            os.seteuid(owner)
        slate.empty_dir(path, time.monotonic() + slate.JANITOR_TIMEOUT_S)
    finally:
        if owner:
            os.seteuid(0)
    os.rmdir(path)
