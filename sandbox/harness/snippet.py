"""A snippet job (``POST /run_code``): the caller's files written into the work dir, the
program compiled once if its language compiles, run once on the given stdin, and what it
printed, its exit code and the files asked for sent back. Nothing is judged here: the caller
reads the output (SandboxFusion's ``run_code``, which veRL's reward calls per test case).

The files in and out are the candidate's: they are written and read under its uid, paths
inside the work dir only, links never followed and only regular files read (a FIFO left in
the work dir must not hang PID 1). stdout, stderr and files travel base64'd: a program's
bytes need not be UTF-8, and JSON's escapes would grow them past the channel's frame."""

from __future__ import annotations

import base64
import os
import stat

from .artifacts import as_candidate
from .processes import compiling, run_process
from .statuses import OK

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


def run_snippet(job, workdir, env):
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
    ran = run_process(language["run"], stdin, job["time_limit_s"], job["memory_mb"], limit,
                      tail, workdir, env, language)
    result["run"] = outcome(ran)
    result["files"], result["missing"] = fetch_files(job.get("fetch_files") or [], workdir)
    return result
