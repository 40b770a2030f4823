"""A stdin/stdout job: compile once, then run the program on each test's input and compare
its output with the expected one (or let the dataset's checker judge it: ``checker.py``).
Python programs run as forks of the warm zygote when it is up, else as a fresh interpreter
per test."""

from __future__ import annotations

import time

from . import artifacts, slate
from .checker import CHECK_TIME_LIMIT_S, Checker, CheckerBlocked, CheckerBroken, OutOfTime
from .compare import outputs_match
from .processes import compiling, kill_group, killed_from_outside, run_process
from .protocol import tail
from .statuses import (
    BAD_TESTS,
    CHECKER_BLOCKED,
    COMPILE_ERROR,
    OK,
    PASSED,
    RUNTIME_ERROR,
    SYNTAX_ERROR,
    TIMEOUT,
    WRONG_ANSWER,
)
from .verdicts import (
    build_turn_over,
    every_test,
    momentary,
    over_budget,
    restarted_clock,
    skipped,
    time_left,
    turn_over,
    yielded,
)
from .zygote import run_forked


def compile_program(job, workdir, env):
    """None when the program is ready to run. With ``artifacts`` (another item's build of
    the same source) nothing compiles; with ``want_artifacts`` the build, or the compile
    error, goes back in ``job["build"]`` for the server to share (sandbox/builds.py)."""
    language = job["language"]
    if not language.get("compile"):
        return None
    if job.get("artifacts") is not None:
        artifacts.unpack(job["artifacts"], workdir)
        return None
    limit = min(job["compile_time_limit_s"], job["deadline"] - time.monotonic())
    result = run_process(
        language["compile"], b"", limit, job["compile_memory_mb"],
        job["output_limit_bytes"], job["stderr_tail_bytes"], workdir, env, compiling(language),
    )
    if result["status"] is None:
        if job.get("want_artifacts"):
            files = artifacts.pack(workdir, language["source"])
            job["build"] = None if files is None else {"files": files}
        return None
    killed = killed_from_outside(result)
    if result["status"] == TIMEOUT or killed:
        # a wall-clock limit, or a kill: the load or what else held the memory may have
        # made it, not the source; never shared with another item or cached
        momentary(job)
    if result["status"] == TIMEOUT:
        reason = f"the compiler ran past its time limit ({limit:.1f} s)"
    else:
        reason = tail(result["stderr"], job["stderr_tail_bytes"])
    if job.get("want_artifacts") and result["status"] == RUNTIME_ERROR and not killed:
        job["build"] = {"compile_error": reason}  # the compiler said no: it would again
    return {"status": COMPILE_ERROR, "detail": reason}


def run_stdio(job, workdir, env, zygote=None):
    """The dataset's checker, if any, compiles first: broken, it is the dataset's fault
    (bad_tests), found before the candidate runs. A compile may end the turn
    (``build_turn_over``); the first turn's checker compile is kept here for the next."""
    checker = Checker(job["checker"], job) if job.get("checker") else None
    try:
        if checker is not None:
            if job.get("continues"):
                # a later turn in a new container unpacks the checker's build the host kept
                # (or, without one, compiles it again): our scheduling's cost, not the
                # item's, so not under (or from) its budget
                with restarted_clock(job):
                    checker.build()
            else:
                checker.build()
            if checker.build_files is not None and build_turn_over(job):  # compiled, shipped
                return with_builds(yielded(job, []), job, checker)
        return with_builds(run_tests(job, workdir, env, zygote, checker), job, checker)
    except CheckerBroken as exc:
        return {"status": BAD_TESTS, "detail": str(exc)[-job["stderr_tail_bytes"]:]}
    finally:
        if checker is not None:
            checker.close()


def with_builds(result, job, checker):
    """``result`` with what this job compiled, for the host to keep and hand on: the
    program's build when asked for (``want_artifacts``), the checker's when it compiled one."""
    if job.get("build") is not None:
        result["build"] = job["build"]
    if checker is not None and checker.build_files is not None:
        result["checker_build"] = {"files": checker.build_files}
    return result


def run_tests(job, workdir, env, zygote, checker):
    failure = compile_program(job, workdir, env)
    if failure:
        return failure
    # a build is there only when this job compiled one, to ship
    if (job.get("build") or {}).get("files") and build_turn_over(job):
        return yielded(job, [])  # the host has the build: a later turn unpacks it
    job["build_names"] = slate.seal_build(workdir)
    use_zygote = job["language"].get("forkserver") and zygote is not None and zygote.alive()
    if not use_zygote:
        return run_each(job, workdir, env, None, checker)
    try:
        try:
            error = zygote.load(job["source"], job["language"]["source"], workdir, env,
                                time.monotonic() + job["time_limit_s"])
        except (TimeoutError, OSError, EOFError, ValueError):
            kill_group(zygote.process)  # replaced after this execution
            return run_each(job, workdir, env, None, checker)  # a fresh interpreter per test
        if error is not None:
            return {"status": SYNTAX_ERROR, "detail": error[-job["stderr_tail_bytes"]:]}
        return run_each(job, workdir, env, zygote, checker)
    finally:  # the loader ends with the execution: the next one's programs fork clean
        zygote.unload(time.monotonic() + 10)


def run_each(job, workdir, env, zygote, checker):
    """Each test's run: a fork of the loaded program (``zygote``) or a fresh process."""
    use_zygote = zygote is not None
    results = []
    for index, test in enumerate(job["tests"]):
        if turn_over(job, len(results)):
            return yielded(job, results)
        limit = time_left(job)
        if limit <= 0:
            return {"status": OK, "tests": results + over_budget(job, len(job["tests"]) - index)}
        stdin_data = test["input"].encode("utf-8", "surrogatepass")
        if results and (why := slate.fresh_workdir(workdir, job["build_names"])) is not None:
            # only the candidate's programs can have left what stays: its failure
            return {"status": OK, "tests": results + every_test(
                len(job["tests"]) - index, RUNTIME_ERROR, f"before this test: {why}")}
        if use_zygote and not zygote.alive():
            use_zygote = False  # a test's program killed it: run the rest the slow way
        if use_zygote:
            run = run_forked(zygote, job, stdin_data, limit)
        else:
            run = run_process(
                job["language"]["run"], stdin_data, limit, job["memory_mb"],
                job["output_limit_bytes"], job["stderr_tail_bytes"], workdir, env,
                job["language"],
            )
        status = run["status"]
        if run.get("starved"):
            job["starved"] = True  # the load's timeout: never remembered nor cached
        # the first test of the item, not of a later turn (``continues``): a later one that
        # raises a SyntaxError at run time (an eval of its input) is that test's runtime error
        if (not results and not job.get("continues") and status == RUNTIME_ERROR
                and is_syntax_error(job, run)):
            return {"status": SYNTAX_ERROR,
                    "detail": tail(run["stderr"], job["stderr_tail_bytes"])}
        stderr = tail(run["stderr"], job["stderr_tail_bytes"])
        if status is None and checker is not None:
            try:
                status, message = judge_output(checker, test, run["stdout"])
            except OutOfTime:
                return {"status": OK,
                        "tests": results + over_budget(job, len(job["tests"]) - index)}
            except CheckerBlocked as exc:  # after the program ran: its doing, not the dataset's
                status, message = CHECKER_BLOCKED, str(exc)
            if message:
                stderr = "\n".join(filter(None, [stderr, "checker: " + message]))[
                    -job["stderr_tail_bytes"]:]
        elif status is None:
            actual = run["stdout"].decode("utf-8", "replace")
            status = PASSED if outputs_match(test["output"], actual, test.get("tolerance"),
                                             job.get("compare") or "lines") else WRONG_ANSWER
        results.append({"status": status, "time_ms": run["time_ms"], "stderr": stderr})
        if status != PASSED and job.get("stop_on_failure"):
            return {"status": OK, "tests": results + skipped(len(job["tests"]) - index - 1)}
    return {"status": OK, "tests": results}


def judge_output(checker, test, output):
    """The checker's verdict on ``output``. A checker that fails on it is asked about the
    reference answer: if it accepts that, the candidate's output made it fail (a candidate
    must not buy a null by crashing a sloppy checker), so the test is wrong_answer; if it
    fails there too, the checker is broken and CheckerBroken goes up (bad_tests, null).

    A check past its time limit is the output's doing only if the check computed (a quarter
    of its limit in CPU at least) and the output cost it more than ``OUTPUT_COST_FACTOR``
    times the CPU the reference answer does; otherwise a loaded machine starved it, which is
    the moment's word: bad_tests, momentary (not cached), never a 0 for a right answer."""
    try:
        return checker.judge(test["input"], output, test["output"])
    except CheckerBroken as failed:
        on_output = failed
    reference = test["output"].encode("utf-8", "surrogatepass")
    try:
        accepted = checker.judge(test["input"], reference, test["output"])[0] == PASSED
    except CheckerBroken as exc:
        raise _broken(checker, f"{on_output}; and on the reference answer: {exc}",
                      on_output, exc) from None
    if not accepted:
        raise _broken(checker, f"{on_output}; and it rejects the reference answer", on_output)
    cpu_s = on_output.cpu_s
    if cpu_s is not None and (cpu_s < CHECK_TIME_LIMIT_S / 4
                              or cpu_s <= OUTPUT_COST_FACTOR * checker.cpu_s):
        raise _broken(checker, f"{on_output}; on the reference answer it needed "
                      f"{checker.cpu_s:.1f} s of CPU: the machine's load, not this output",
                      on_output)
    return WRONG_ANSWER, f"the checker failed on this output, not on the reference: {on_output}"


def _broken(checker, reason, *failures):
    """CheckerBroken (bad_tests); momentary when a check's time limit had a part in it."""
    return checker.broken(reason, moment=any(f.cpu_s is not None for f in failures))


OUTPUT_COST_FACTOR = 2.0


def is_syntax_error(job, run):
    last_lines = run["stderr"].decode("utf-8", "replace").strip().splitlines()[-1:]
    markers = job.get("syntax_error_markers") or []
    return any(line.startswith(m) for line in last_lines for m in markers)
