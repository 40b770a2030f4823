"""One execution: a fresh work dir, the job of its mode, then the clean slate: every process
of the candidate's killed, every place it could write emptied, and the container checked
against its fresh state."""

from __future__ import annotations

import math
import os
import tempfile
import time

from . import slate
from .asserts import run_asserts
from .processes import candidate_ran, new_execution
from .scorer import run_scoring
from .snippet import run_snippet
from .statuses import HARNESS_ERROR, OK
from .stdio import run_stdio
from .tester import run_tested


def prepare_workdir(job):
    """A fresh work dir: made by root with the source in it, then handed to the candidate's uid
    (root cannot enter it afterwards, and does not need to)."""
    workdir = tempfile.mkdtemp(dir=slate.WORK_ROOT)
    if job["mode"] != "score":  # a scoring chunk brings answers to score, not a program
        source = os.path.join(workdir, "solution.py" if job["mode"] == "assert"
                              else job["language"]["source"])
        with open(source, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(job["source"])  # a lone surrogate stays invalid UTF-8: the compiler's
        if slate.isolated():
            os.chown(source, *slate.CANDIDATE)
    if slate.isolated():
        os.chown(workdir, *slate.CANDIDATE)
    return workdir


def execute(job, zygote, state):
    """One execution in a fresh work dir; afterwards the container is swept and checked
    against its fresh state (``state``), and reported dirty unless it matches."""
    new_execution()
    spare = (zygote.process.pid,) if zygote is not None else ()
    started = time.monotonic()
    job = {**job, "started": started, "deadline": started + (job.get("budget_s") or math.inf),
           "yield_at": started + job["yield_after_s"] if job.get("yield_after_s") else None}
    workdir = None
    try:
        workdir = prepare_workdir(job)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
        if job["mode"] == "stdio":
            result = run_stdio(job, workdir, env, zygote)
        elif job["mode"] == "snippet":
            result = run_snippet(job, workdir, env, zygote)
        elif job["mode"] == "score":
            result = run_scoring(job, workdir, state)
        elif slate.isolated():  # the caller's test code, in a process of its own
            result = run_tested(job, workdir, env, zygote)
        else:  # one uid for everything (no root): nothing to keep the test code from
            result = run_asserts(job, workdir, env, zygote)
    except Exception as exc:  # noqa: BLE001 - report, never die: we are PID 1
        detail = f"{type(exc).__name__}: {exc}"[:500]
        # once a program of the candidate's ran, a failure is its doing: failed tests (0)
        result = ({"status": OK, "tests": [], "candidate_failed": True,
                   "detail": f"the run failed after the program started: {detail}"}
                  if candidate_ran() else {"status": HARNESS_ERROR, "detail": detail})
    finally:
        spare = (*spare, *state.kept)  # the scorer's fork server, if this container has one
        left_behind = slate.other_processes(exclude=spare)
        try:
            slate.sweep(keep=spare)
            problems = [why for why in [slate.janitor(workdir)] if why]
            if workdir is not None:
                try:
                    slate.remove_workdir(workdir)
                except (OSError, TimeoutError) as exc:
                    problems.append(f"work dir not removed: {exc}")
            problems += state.problems(zygote)
        except Exception as exc:  # noqa: BLE001 - unproven is dirty; and we are PID 1
            problems = [f"the clean-up failed: {type(exc).__name__}: {exc}"]
    if job.get("momentary"):  # set on the way (verdicts.momentary): never cached
        result["momentary"] = True
    if job.get("starved"):  # a test's timeout the load may have made (processes.starved)
        result["starved"] = True
    result["left_behind"] = len(left_behind)
    result["dirty"] = bool(left_behind or problems)
    result["unclean"] = problems[:5]
    return result
