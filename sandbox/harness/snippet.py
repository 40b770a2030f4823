"""A snippet job (``POST /run_code``): the caller's files written into the work dir, the
program compiled once if its language compiles, run once on the given stdin, and what it
printed, its exit code and the files asked for sent back. Nothing is judged here: the caller
reads the output (SandboxFusion's ``run_code``, which veRL's reward calls per test case).

The files in and out are the candidate's: they are written and read under its uid, paths
inside the work dir only, links never followed and only regular files read (a FIFO left in
the work dir must not hang PID 1). stdout, stderr and files travel base64'd: a program's
bytes need not be UTF-8, and JSON's escapes would grow them past the channel's frame.

Python runs as a fork of the warm zygote (``zygote.run_script``: ~2 ms where a fresh
interpreter costs 15-60 ms, most of a call) unless files came with the call: an uploaded
module named like one the zygote has imported (``json``, ``socket``) would lose to it, where a
fresh ``python3`` imports it. Nor with a NUL in the source, which ``compile`` refuses and
Python 3.11 reads past. A zygote that cannot start the program leaves it to a fresh
interpreter too."""

from __future__ import annotations

import base64
import os
import stat
import time

from . import slate
from .artifacts import as_candidate
from .processes import compiling, kill_group, run_process
from .statuses import OK, RUNTIME_ERROR
from .zygote import run_forked

MAX_FETCH_BYTES = 16 * 1024 * 1024  # all fetched files together: the reply is one frame


def inside(workdir, rel):
    """The path of ``rel`` in ``workdir``; ValueError for an absolute path or a ``..``."""
    parts = rel.replace("\\", "/").split("/")
    if os.path.isabs(rel) or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"bad file path {rel!r}")
    return os.path.join(workdir, *parts)


def write_files(files, workdir):
    """The caller's files (path -> base64), written as the candidate before anything runs."""
    with as_candidate():
        for rel, data in files.items():
            path = inside(workdir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(data))


def fetch_files(names, workdir):
    """``{path: base64}`` of the files asked for that exist as regular files, and the
    reasons for the others (``{path: why}``), within MAX_FETCH_BYTES in all."""
    found, missing, total = {}, {}, 0
    with as_candidate():
        for rel in names:
            try:
                path = inside(workdir, rel)
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except (ValueError, OSError) as exc:
                missing[rel] = str(exc) if isinstance(exc, ValueError) else exc.strerror
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    missing[rel] = "not a regular file"
                    continue
                if total + st.st_size > MAX_FETCH_BYTES:
                    missing[rel] = f"over the {MAX_FETCH_BYTES >> 20} MiB of fetched files"
                    continue
                with os.fdopen(os.dup(fd), "rb") as f:
                    data = f.read(MAX_FETCH_BYTES - total + 1)
                total += len(data)
                found[rel] = base64.b64encode(data).decode()
            finally:
                os.close(fd)
    return found, missing


def outcome(run):
    """One command's end for the host: how it ended, its code, its output (base64)."""
    return {"status": run["status"], "code": run["code"], "time_ms": run["time_ms"],
            "started": run["started"],
            "stdout": base64.b64encode(run["stdout"]).decode(),
            "stderr": base64.b64encode(run["stderr"]).decode()}


def run_program(job, stdin, tail, workdir, env, zygote):
    """The one run: on the zygote when the language and the call allow it, else (or when the
    zygote could not start it) as a fresh process of the language's run command."""
    language = job["language"]
    if (language.get("forkserver") and not job.get("files") and "\0" not in job["source"]
            and zygote is not None and zygote.alive()):
        try:
            zygote.wait_ready(time.monotonic() + job["time_limit_s"])
            ran = run_forked(zygote, {**job, "stderr_tail_bytes": tail}, stdin,
                             job["time_limit_s"], (workdir, env))
        except (OSError, EOFError, ValueError) as exc:
            ran = {"status": RUNTIME_ERROR, "code": None, "stdout": b"", "started": False,
                   "stderr": f"cannot start: {exc}".encode(), "time_ms": 0.0}
        if ran["started"]:
            return ran
        kill_group(zygote.process)  # replaced after this execution (serve.py)
        if slate.isolated() and not slate.kill_user(slate.CANDIDATE[0]):
            return ran  # a child it forked outlived the kill: no second copy beside it
    return run_process(language["run"], stdin, job["time_limit_s"], job["memory_mb"],
                       job["output_limit_bytes"], tail, workdir, env, language)


def run_snippet(job, workdir, env, zygote=None):
    """Compile (if the language does), then run once; the run is skipped when the compile
    did not end with exit code 0, as SandboxFusion skips it."""
    language = job["language"]
    limit = job["output_limit_bytes"]
    # the whole of stderr up to the output limit (run_process keeps 4x its tail)
    tail = limit // 4 + 1
    write_files(job.get("files") or {}, workdir)
    result = {"status": OK, "compile": None, "run": None}
    if language.get("compile"):
        made = run_process(language["compile"], b"", job["compile_time_limit_s"],
                           job["compile_memory_mb"], limit, tail, workdir, env,
                           compiling(language))
        result["compile"] = outcome(made)
        if made["status"] is not None:
            result["files"], result["missing"] = fetch_files(job.get("fetch_files") or [],
                                                             workdir)
            return result
    stdin = (job.get("stdin") or "").encode("utf-8", "surrogatepass")
    ran = run_program(job, stdin, tail, workdir, env, zygote)
    result["run"] = outcome(ran)
    result["files"], result["missing"] = fetch_files(job.get("fetch_files") or [], workdir)
    return result
