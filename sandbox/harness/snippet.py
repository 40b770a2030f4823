"""A snippet job (``POST /run_code``): the caller's files written into the work dir, the
program compiled once if its language compiles, run once on the given stdin, and what it
printed, its exit code and the files asked for sent back. Nothing is judged here: the caller
reads the output (SandboxFusion's ``run_code``, which veRL's reward calls per test case).

The files in and out are the candidate's: written under its uid, paths inside the work dir
only, and read back by a child that holds its uid, no link followed on the way
(``fetch.py``). stdout, stderr and files travel base64'd: a program's bytes need not be
UTF-8, and JSON's escapes would grow them past the channel's frame. All of them together stay
within the job's response limit, cut here before they reach the host (``reply``).

Python runs as a fork of the warm zygote (``zygote.run_script``: ~2 ms where a fresh
interpreter costs 15-60 ms, most of a call) unless files came with the call: an uploaded
module named like one the zygote has imported (``json``, ``socket``) would lose to it, where a
fresh ``python3`` imports it. Nor with a NUL in the source, which ``compile`` refuses and
Python 3.11 reads past. A zygote that cannot start the program leaves it to a fresh
interpreter too."""

from __future__ import annotations

import base64
import os
import time

from . import slate
from .artifacts import as_candidate
from .fetch import fetch_files
from .paths import make_parents, path_parts
from .processes import compiling, kill_group, run_process
from .statuses import OK, RUNTIME_ERROR
from .zygote import run_forked

# What a call sends back, its streams' bytes and its files' base64 together, when the job sets
# no limit: the reply is one frame, and the server holds it while it answers
RESPONSE_LIMIT_BYTES = 16 * 1024 * 1024


def write_files(files, workdir):
    """The caller's files (path -> base64), written as the candidate before anything runs;
    BadPath (a ValueError) or OSError for one that cannot be (the host refuses those first)."""
    made = set()
    with as_candidate():
        for rel, data in files.items():
            parts = path_parts(rel)
            make_parents(workdir, parts, made)
            path = os.path.join(workdir, *parts)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(data))


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
    commands = {}
    if language.get("compile"):
        commands["compile"] = run_process(language["compile"], b"", job["compile_time_limit_s"],
                                          job["compile_memory_mb"], limit, tail, workdir, env,
                                          compiling(language))
    if commands.get("compile", {}).get("status") is None:
        stdin = (job.get("stdin") or "").encode("utf-8", "surrogatepass")
        commands["run"] = run_program(job, stdin, tail, workdir, env, zygote)
    return reply(commands, job, workdir)


# The order in which the response limit is spent: first what a caller judges
STREAMS = (("run", "stdout"), ("compile", "stdout"), ("compile", "stderr"), ("run", "stderr"))


def reply(commands, job, workdir):
    """Each command's outcome and the files, all within the job's response limit: the
    streams in STREAMS's order keep their first bytes, then the files that still fit come
    whole. ``cut`` names each stream cut (``"run.stdout"``), ``cut_files`` each file left out
    for the limit, with its size in bytes before."""
    left = job.get("response_limit_bytes") or RESPONSE_LIMIT_BYTES
    result = {"status": OK, "compile": None, "run": None, "cut": {}}
    commands = {step: dict(ran) for step, ran in commands.items()}
    for step, stream in STREAMS:
        if step in commands:
            data = commands[step][stream]
            if len(data) > left:
                result["cut"][f"{step}.{stream}"] = len(data)
                commands[step][stream] = data = data[:left]
            left -= len(data)
    result.update((step, outcome(ran)) for step, ran in commands.items())
    result["files"], result["missing"], result["cut_files"] = fetch_files(
        job.get("fetch_files") or [], workdir, left)
    return result
